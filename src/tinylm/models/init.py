"""GPT-2 initialization, shared by both architectures.

PyTorch's defaults scale Linear weights by 1/sqrt(fan_in) and start embeddings at std 1. GPT-2
instead starts every weight at N(0, 0.02) (`init_std`), biases at zero, and the projections that
write into the residual stream smaller still, at 0.02 / sqrt(2 * n_blocks): each block adds to the
stream twice, so 2L random contributions add up, and scaling each down by sqrt(2L) keeps the
stream's size independent of depth.

`zero_init_head` (untied heads only) starts the output head at zero instead, as modded-nanogpt does:
the first logits are all equal (the loss starts at exactly ln V), the head learns first, and the
gradient reaches the blocks once the head has moved off zero.
"""

from __future__ import annotations

import math

from torch import nn

# names of the Linear layers that write into the residual stream, in both architectures
RESIDUAL_PROJECTIONS = ("o_proj", "down", "proj")


def init_gpt2(model: nn.Module, n_blocks: int, std: float = 0.02, zero_head: bool = False) -> None:
    residual_std = std / math.sqrt(2 * n_blocks)
    for name, module in model.named_modules():
        if isinstance(module, nn.Linear):
            is_residual = name.rsplit(".", 1)[-1] in RESIDUAL_PROJECTIONS
            nn.init.normal_(module.weight, mean=0.0, std=residual_std if is_residual else std)
            if module.bias is not None:
                nn.init.zeros_(module.bias)
        elif isinstance(module, nn.Embedding):
            nn.init.normal_(module.weight, mean=0.0, std=std)
    head = getattr(model, "lm_head", None)
    if zero_head and head is not None:
        nn.init.zeros_(head.weight)
