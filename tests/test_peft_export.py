"""Our LoRA adapters, written as PEFT files, loaded by `peft` onto the `transformers` base we export.

The reference is code we did not write: `peft.PeftModel.from_pretrained` on the
`AutoModelForCausalLM` read from our exported base must reproduce our logits to 1e-5 in float32,
and our merged model, exported on its own, must equal that PEFT model to 1e-6 (and PEFT's own
`merge_and_unload`). Every B is random, so an adapter that failed to load or loaded onto the wrong
layer would change the logits. Nothing is downloaded.
"""

from __future__ import annotations

import copy
import json
from pathlib import Path

import pytest
import torch
from torch import nn

from model_variants import modern_config
from tinylm.config import ModelConfig
from tinylm.errors import TinyLMError
from tinylm.interop.hf import write_hf_folder
from tinylm.interop.peft_export import ADAPTER_CONFIG, ADAPTER_WEIGHTS, write_peft_adapter
from tinylm.models.factory import build_model
from tinylm.models.lora import LoraConfig, LoRALinear, apply_lora, base_state_dict, merge_lora

transformers = pytest.importorskip("transformers")
peft = pytest.importorskip("peft")

ADAPTER_TOLERANCE, MERGED_TOLERANCE = 1e-5, 1e-6


def lora_model(config: ModelConfig, cfg: LoraConfig, seed: int = 0) -> nn.Module:
    """A model with random norms (so a swapped tensor cannot hide) and random, non-zero adapters, in eval mode."""
    torch.manual_seed(seed)
    model = build_model(config).eval()
    with torch.no_grad():
        for p in model.parameters():
            p.add_(torch.randn_like(p) * 0.02)
    apply_lora(model, cfg)
    with torch.no_grad():
        for m in model.modules():
            if isinstance(m, LoRALinear):
                m.lora_B.normal_(0.0, 0.05)
    return model


def hf_model(folder: Path) -> nn.Module:
    return transformers.AutoModelForCausalLM.from_pretrained(folder, dtype=torch.float32).eval()


def peft_model(model: nn.Module, cfg: LoraConfig, root: Path) -> nn.Module:
    """Export the frozen base and the adapter beside it, then load both the way a PEFT user does."""
    (root / "base").mkdir()
    write_hf_folder(root / "base", base_state_dict(model), model.config)
    write_peft_adapter(model, cfg, root / "adapter", str(root / "base"))
    return peft.PeftModel.from_pretrained(hf_model(root / "base"), root / "adapter").eval()


def logits(model: nn.Module, idx: torch.Tensor) -> torch.Tensor:
    """Ours return (logits, loss); `transformers` and `peft` return an output object."""
    with torch.no_grad():
        out = model(idx)
    return out[0] if isinstance(out, tuple) else out.logits


def max_error(a: nn.Module, b: nn.Module, vocab: int) -> float:
    torch.manual_seed(1)
    idx = torch.randint(0, vocab, (2, 24))
    return (logits(a, idx) - logits(b, idx)).abs().max().item()


CASES = {
    "llama_gqa_tied": (modern_config("gqa", context_length=24), LoraConfig(rank=4, alpha=8)),
    "qwen3_untied_rslora": (modern_config("qknorm", context_length=24, tie_embeddings=False),
                            LoraConfig(rank=4, alpha=8, rslora=True)),
    "llama_dropout_eval": (modern_config("mha", context_length=24), LoraConfig(rank=2, alpha=4, dropout=0.3)),
    "llama_q_v_only": (modern_config("mqa", context_length=24), LoraConfig(rank=8, targets=("q", "v"))),
    "qwen3_all_linear": (modern_config("qknorm", context_length=24),
                         LoraConfig(rank=3, alpha=5.5, targets="all-linear")),
    "mistral_window": (modern_config("window", context_length=24), LoraConfig(rank=4, targets=("k", "o", "up"))),
}


@pytest.mark.parametrize("case", list(CASES))
def test_peft_reproduces_our_logits(case: str, tmp_path: Path, one_thread: None) -> None:
    config, cfg = CASES[case]
    model = lora_model(config, cfg)
    reference = peft_model(model, cfg, tmp_path)
    assert max_error(model, reference, config.vocab_size) < ADAPTER_TOLERANCE
    without_adapter = hf_model(tmp_path / "base")
    assert max_error(model, without_adapter, config.vocab_size) > 1e-3  # the adapters matter


@pytest.mark.parametrize("case", ["llama_gqa_tied", "qwen3_untied_rslora"])
def test_merged_export_equals_the_peft_model(case: str, tmp_path: Path, one_thread: None) -> None:
    config, cfg = CASES[case]
    model = lora_model(config, cfg)
    reference = peft_model(model, cfg, tmp_path)
    (tmp_path / "merged").mkdir()
    write_hf_folder(tmp_path / "merged", merge_lora(copy.deepcopy(model)).state_dict(), config)
    merged = hf_model(tmp_path / "merged")
    assert max_error(merged, reference, config.vocab_size) < MERGED_TOLERANCE
    peft_merged = copy.deepcopy(reference).merge_and_unload()
    ours, theirs = merged.state_dict(), peft_merged.state_dict()
    assert set(ours) == set(theirs)
    assert max((ours[k] - theirs[k]).abs().max().item() for k in ours) < MERGED_TOLERANCE


def test_adapter_files_use_peft_names(tmp_path: Path) -> None:
    from safetensors.torch import load_file

    cfg = LoraConfig(rank=2, alpha=3, targets=("q", "down"), rslora=True)
    model = lora_model(modern_config("qknorm"), cfg)
    write_peft_adapter(model, cfg, tmp_path / "adapter", "my/base")
    weights = load_file(str(tmp_path / "adapter" / ADAPTER_WEIGHTS))
    assert set(weights) == {f"base_model.model.model.layers.{i}.{layer}.{part}.weight" for i in range(2)
                            for layer in ("self_attn.q_proj", "mlp.down_proj") for part in ("lora_A", "lora_B")}
    assert torch.equal(weights["base_model.model.model.layers.1.mlp.down_proj.lora_B.weight"],
                       model.blocks[1].mlp.down.lora_B)
    config = json.loads((tmp_path / "adapter" / ADAPTER_CONFIG).read_text())
    assert config["peft_type"] == "LORA" and config["task_type"] == "CAUSAL_LM"
    assert (config["r"], config["lora_alpha"], config["use_rslora"]) == (2, 3, True)
    assert config["target_modules"] == ["down_proj", "q_proj"]
    assert config["base_model_name_or_path"] == "my/base"
    assert peft.LoraConfig.from_pretrained(tmp_path / "adapter").r == 2  # PEFT reads it


@pytest.mark.parametrize(
    ("variant", "message"),
    [("moe", "not Qwen3MoeForCausalLM|not MixtralForCausalLM"), ("mla", "not DeepseekV3ForCausalLM"),
     ("gated", "attn_output_gate")],
)
def test_export_refuses_models_without_an_exact_peft_mapping(variant: str, message: str, tmp_path: Path) -> None:
    config = modern_config(variant, norm_eps=1e-6) if variant == "mla" else modern_config(variant)
    cfg = LoraConfig(rank=2)
    model = lora_model(config, cfg)
    with pytest.raises(TinyLMError, match=message) as error:
        write_peft_adapter(model, cfg, tmp_path / "adapter", "base")
    assert "\n" not in str(error.value)
    assert not (tmp_path / "adapter").exists()


def test_export_refuses_a_model_without_adapters(tmp_path: Path) -> None:
    model = build_model(modern_config("gqa"))
    with pytest.raises(TinyLMError, match="no LoRA adapters"):
        write_peft_adapter(model, LoraConfig(rank=2), tmp_path / "adapter", "base")


def test_bad_lora_settings_fail_before_export(tmp_path: Path) -> None:
    model = build_model(modern_config("gqa"))
    with pytest.raises(TinyLMError, match="LoRA rank must be a positive integer"):
        apply_lora(model, LoraConfig(rank=0))
    with pytest.raises(TinyLMError, match="unknown LoRA target 'attention'"):
        apply_lora(model, LoraConfig(rank=2, targets=("attention",)))
