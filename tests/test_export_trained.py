"""A model is exportable as trained, not only as initialized: a few real AdamW steps, then transformers.

Initialization leaves many tensors at special values (zero biases, unit norms) that can hide a
missing or mis-mapped weight; after training every parameter has moved. In particular the classic
model has no head bias by default, as GPT-2 has none, so a trained classic model exports.
"""

from __future__ import annotations

from pathlib import Path

import pytest
import torch

from model_variants import classic_config, modern_config
from tinylm.checkpoint import save_checkpoint
from tinylm.config import ModelConfig
from tinylm.errors import TinyLMError
from tinylm.interop.hf import write_hf_folder
from tinylm.interop.hf_export import export_checkpoint
from tinylm.models.factory import build_model
from tinylm.tokenizer.train import train_bpe

transformers = pytest.importorskip("transformers")

TOLERANCE = 1e-5
VOCAB = 300  # the tokenizer below has at most this many tokens
CONFIGS = {
    "classic": classic_config(vocab_size=VOCAB),
    "modern": modern_config("gqa", vocab_size=VOCAB),
    "mla": modern_config("mla", vocab_size=VOCAB, norm_eps=1e-6),  # DeepseekV3's latent norms use eps 1e-6
}


def trained(config: ModelConfig, steps: int = 5) -> torch.nn.Module:
    torch.manual_seed(0)
    model = build_model(config).train()
    before = {name: p.detach().clone() for name, p in model.named_parameters()}
    optimizer = torch.optim.AdamW(model.parameters(), lr=1e-2, weight_decay=0.1)
    for _ in range(steps):
        idx = torch.randint(0, config.vocab_size, (4, config.context_length + 1))
        _, loss = model(idx[:, :-1], idx[:, 1:], return_logits=False)
        optimizer.zero_grad(set_to_none=True)
        loss.backward()
        optimizer.step()
    for name, p in model.named_parameters():
        assert not torch.equal(p, before[name]), f"{name} did not train"
    return model.eval()


@pytest.mark.parametrize("name", list(CONFIGS))
def test_trained_model_exports_and_transformers_computes_the_same_logits(name: str, tmp_path: Path) -> None:
    """Through a checkpoint and `export_checkpoint`, the path `tinylm export` takes."""
    model = trained(CONFIGS[name])
    tokenizer = train_bpe(["def add(a, b):\n    return a + b\n" * 20, "the quick brown fox " * 20], VOCAB)
    checkpoint = save_checkpoint(tmp_path / "run", 5, model, model.config,
                                 tokenizer_file=tokenizer.save(tmp_path / "tokenizer.json"))
    out, _ = export_checkpoint(checkpoint, tmp_path / "hf")
    hf_model = transformers.AutoModelForCausalLM.from_pretrained(out, dtype=torch.float32).eval()
    idx = torch.randint(0, VOCAB, (2, model.config.context_length))
    with torch.no_grad():
        error = (model(idx)[0] - hf_model(idx).logits).abs().max().item()
    assert error < TOLERANCE


def test_a_trained_head_bias_is_refused_naming_it(tmp_path: Path) -> None:
    model = trained(classic_config(vocab_size=VOCAB, head_bias=True))
    with pytest.raises(TinyLMError, match="lm_head bias is not zero"):
        write_hf_folder(tmp_path, model.state_dict(), model.config)
