"""Folding a LoRA adapter into its base weight: W' = W + scale * B A.

The one formula both sides of LoRA need: training merges adapters into the model it holds
(`models/lora.py`), and loading an adapter-only checkpoint rebuilds the fine-tuned model from
its base checkpoint and the stored A and B (`checkpoint.py`). It lives here, below both, because it
is plain tensor algebra: it needs no module, no optimizer and no LoRA configuration beyond `scale`.
"""

from __future__ import annotations

import torch

from tinylm.errors import TinyLMError


def merged_weight(weight: torch.Tensor, lora_A: torch.Tensor, lora_B: torch.Tensor, scale: float) -> torch.Tensor:
    """W + scale * B A, summed in float32 and returned in W's dtype."""
    return (weight.float() + scale * (lora_B.float() @ lora_A.float())).to(weight.dtype)


def merged_weights(base: dict[str, torch.Tensor], lora: dict[str, torch.Tensor], scale: float
                   ) -> dict[str, torch.Tensor]:
    """A base state dict with every adapter of `lora` ({layer}.lora_A / .lora_B) folded into {layer}.weight."""
    layers = sorted({key.rpartition(".")[0] for key in lora})
    if set(lora) != {f"{layer}.{part}" for layer in layers for part in ("lora_A", "lora_B")}:
        raise TinyLMError("LoRA adapter is malformed: it must hold exactly one lora_A and one lora_B per layer")
    out = dict(base)
    for layer in layers:
        weight, lora_A, lora_B = base.get(f"{layer}.weight"), lora[f"{layer}.lora_A"], lora[f"{layer}.lora_B"]
        if weight is None:
            raise TinyLMError(f"LoRA adapter does not fit its base: the base has no {layer}.weight")
        if lora_A.shape[1] != weight.shape[1] or lora_B.shape != (weight.shape[0], lora_A.shape[0]):
            raise TinyLMError(f"LoRA adapter does not fit its base: {layer} is {tuple(weight.shape)}, the adapter "
                              f"has A {tuple(lora_A.shape)} and B {tuple(lora_B.shape)}")
        out[f"{layer}.weight"] = merged_weight(weight, lora_A, lora_B, scale)
    return out
