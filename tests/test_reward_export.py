"""A reward model exported as a transformers sequence-classification model scores exactly as ours (1e-5)."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch

from tinylm.config import ModelConfig
from tinylm.errors import TinyLMError
from tinylm.interop.hf_reward_export import reward_architecture, write_reward_folder
from tinylm.models.factory import build_model
from tinylm.models.reward_model import RewardModel

transformers = pytest.importorskip("transformers")
pytestmark = pytest.mark.usefixtures("one_thread")

PAD = 0  # the end-of-text id: pads the rows, and only opens a conversation otherwise


def reward_model(arch: str, **fields: object) -> RewardModel:
    config = ModelConfig(arch=arch, vocab_size=97, context_length=24, n_embed=32, n_head=4, n_blocks=2,
                         **({"n_kv_head": 2, "mlp_hidden": 48} if arch == "modern" else {}), **fields)
    torch.manual_seed(0)
    model = RewardModel(build_model(config)).eval()
    with torch.no_grad():
        for name, p in model.named_parameters():
            p.add_(torch.randn_like(p) * 0.1) if not name.endswith("lm_head.bias") else p.zero_()
    return model


def padded_batch(lengths: list[int], width: int, vocab: int) -> torch.Tensor:
    """Rows opening with the pad/end-of-text id, then real tokens (never the pad id), then padding."""
    g = torch.Generator().manual_seed(1)
    ids = torch.full((len(lengths), width), PAD)
    for row, n in enumerate(lengths):
        ids[row, 1:n] = torch.randint(1, vocab, (n - 1,), generator=g)
    return ids


@pytest.mark.parametrize(("arch", "fields", "expected"), [
    ("modern", {}, "LlamaForSequenceClassification"),
    ("modern", {"qk_norm": True, "tie_embeddings": True}, "Qwen3ForSequenceClassification"),
    ("classic", {}, "GPT2ForSequenceClassification"),
], ids=["llama", "qwen3", "gpt2"])
def test_exported_reward_model_scores_equal_ours(tmp_path: Path, arch: str, fields: dict[str, object],
                                                 expected: str) -> None:
    model = reward_model(arch, **fields)
    assert reward_architecture(model.config) == expected
    write_reward_folder(tmp_path, model.state_dict(), model.config, pad_token_id=PAD)
    hf, info = transformers.AutoModelForSequenceClassification.from_pretrained(
        tmp_path, dtype=torch.float32, output_loading_info=True)
    assert type(hf).__name__ == expected
    assert not any(info[k] for k in ("missing_keys", "unexpected_keys", "mismatched_keys")), info
    lengths = [24, 7, 15, 2]
    ids = padded_batch(lengths, 24, model.config.vocab_size)
    with torch.no_grad():
        ours = model(ids, torch.tensor(lengths))
        theirs = hf.eval()(input_ids=ids).logits.squeeze(-1)
    assert ours.shape == theirs.shape == (4,)
    assert torch.allclose(ours, theirs, atol=1e-5, rtol=0), (ours, theirs)
    assert ours.std() > 1e-3  # the rows really score differently: the test compares something


def test_a_backbone_without_a_classifier_counterpart_is_refused() -> None:
    config = ModelConfig(arch="modern", vocab_size=97, context_length=24, n_embed=32, n_head=4, n_blocks=1,
                         n_experts=4, n_experts_per_token=2, qk_norm=True)
    with pytest.raises(TinyLMError, match="no sequence-classification export"):
        reward_architecture(config)
