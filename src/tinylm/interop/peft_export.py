"""Write a LoRA adapter the way PEFT stores one, to sit beside the base exported by interop/hf.py.

    ADAPTER/adapter_config.json        peft_type LORA, r, lora_alpha, lora_dropout, use_rslora, target_modules
    ADAPTER/adapter_model.safetensors  base_model.model.<transformers layer>.lora_A.weight [r, in]
                                       base_model.model.<transformers layer>.lora_B.weight [out, r]

`peft.PeftModel.from_pretrained(AutoModelForCausalLM.from_pretrained(BASE), ADAPTER)` then computes
what our model with unmerged adapters computes (tests/test_peft_export.py: 1e-5 in float32). PEFT's
LoRA layer is the same formula, lora_B(lora_A(dropout(x))) * lora_alpha / r (or / sqrt(r)), with
A and B held as nn.Linear weights of the shapes ours have, so the tensors cross unchanged and only
their names change, through the table the base weights use (interop/names.py): the two cannot drift.

Only dense standard-attention models (Llama, Mistral, Qwen3) are written. `transformers` stores
MoE experts as one fused tensor per layer, which PEFT adapts differently; MLA and GPT-2 (fused qkv,
Conv1D weights) would need mappings of their own.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import torch
from torch import nn

from tinylm.checkpoint.save import save_safetensors
from tinylm.config import ModelConfig
from tinylm.errors import TinyLMError
from tinylm.interop.hf import hf_architecture, to_hf_weights
from tinylm.interop.names import rename
from tinylm.interop.output_folder import output_folder
from tinylm.models.lora import LoraConfig, base_state_dict, lora_state_dict

ADAPTER_CONFIG, ADAPTER_WEIGHTS = "adapter_config.json", "adapter_model.safetensors"
PEFT_PREFIX = "base_model.model."  # PeftModel -> LoraModel -> the transformers CausalLM
EXACT_ARCHITECTURES = ("LlamaForCausalLM", "MistralForCausalLM", "Qwen3ForCausalLM")


def _check_exportable(config: ModelConfig) -> str:
    architecture = hf_architecture(config)  # refuses what has no transformers counterpart at all
    if architecture not in EXACT_ARCHITECTURES:
        raise TinyLMError(f"PEFT export of LoRA adapters supports dense standard-attention models "
                          f"({', '.join(EXACT_ARCHITECTURES)}), not {architecture}: merge the adapter and export "
                          f"the merged model instead")
    return architecture


def peft_adapter_weights(lora: dict[str, torch.Tensor], config: ModelConfig) -> dict[str, torch.Tensor]:
    """`lora_state_dict` tensors under PEFT's names, e.g. blocks.0.attn.q_proj.lora_A ->
    base_model.model.model.layers.0.self_attn.q_proj.lora_A.weight."""
    architecture = _check_exportable(config)
    out: dict[str, torch.Tensor] = {}
    for key, tensor in lora.items():
        layer, _, part = key.rpartition(".")
        (hf_weight,) = rename({f"{layer}.weight": tensor}, architecture, to_hf=True)
        out[f"{PEFT_PREFIX}{hf_weight.removesuffix('.weight')}.{part}.weight"] = tensor.detach().cpu().contiguous()
    return out


def _target_modules(adapted: set[str], hf_base_names: list[str]) -> list[str]:
    """PEFT's short module names (q_proj, ...), checked to select exactly the adapted layers in the base."""
    short = sorted({layer.rpartition(".")[2] for layer in adapted})
    selected = {name.removesuffix(".weight") for name in hf_base_names
                if name.endswith(".weight") and name.removesuffix(".weight").rpartition(".")[2] in short}
    if selected != adapted:
        extra = sorted(selected - adapted)[:3]
        raise TinyLMError(f"PEFT's target_modules {short} would also adapt {extra}: export needs adapters on every "
                          f"layer of a kind (as apply_lora makes them)")
    return short


def peft_adapter_config(
    cfg: LoraConfig, target_modules: list[str], base_model_name_or_path: str
) -> dict[str, Any]:
    """The adapter_config.json PEFT's LoraConfig reads."""
    alpha = cfg.lora_alpha
    return {
        "peft_type": "LORA", "task_type": "CAUSAL_LM", "base_model_name_or_path": base_model_name_or_path,
        "r": cfg.rank, "lora_alpha": int(alpha) if alpha.is_integer() else alpha, "lora_dropout": cfg.dropout,
        "use_rslora": cfg.rslora, "target_modules": target_modules, "bias": "none", "fan_in_fan_out": False,
        "init_lora_weights": True, "inference_mode": True, "modules_to_save": None,
    }


def write_peft_adapter(
    model: nn.Module, cfg: LoraConfig, out_dir: str | Path, base_model_name_or_path: str
) -> Path:
    """Write `out_dir` (whole or not at all) with the adapters of a model wrapped by `apply_lora`."""
    config: ModelConfig = model.config
    weights = peft_adapter_weights(lora_state_dict(model), config)
    if not weights:
        raise TinyLMError("this model has no LoRA adapters to export (apply_lora was not called)")
    adapted = {key.removeprefix(PEFT_PREFIX).rpartition(".lora_")[0] for key in weights}
    hf_base_names = list(to_hf_weights(base_state_dict(model), config))
    adapter_config = peft_adapter_config(cfg, _target_modules(adapted, hf_base_names), base_model_name_or_path)
    with output_folder(out_dir) as folder:
        save_safetensors(weights, folder / ADAPTER_WEIGHTS, metadata={"format": "pt"})
        (folder / ADAPTER_CONFIG).write_text(json.dumps(adapter_config, indent=2) + "\n", encoding="utf-8")
    return Path(out_dir)
