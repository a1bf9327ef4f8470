"""The modules inspection hooks onto, named once for the modern and the classic model.

A `LayerSites` is one block seen from outside: where its attention computes probabilities
(`attend`), where the heads' outputs enter the residual stream (`o_proj`, whose input holds them
side by side, `head_dim` wide each), what the MLP writes (`mlp`) and where its neurons are (the
input of `mlp_down`; none for a mixture of experts, whose tokens each see different experts).
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Any

import torch
from torch import nn
from torch.utils.hooks import RemovableHandle

from tinylm.models.attend import Attend


@dataclass(frozen=True)
class LayerSites:
    block: nn.Module
    attend: Attend
    o_proj: nn.Linear
    mlp: nn.Module
    mlp_down: nn.Linear | None
    n_head: int
    head_dim: int


def layer_sites(model: nn.Module) -> list[LayerSites]:
    sites = []
    for block in model.blocks:
        attn = block.attn
        mlp = block.mlp
        down = getattr(mlp, "down", None) or getattr(mlp, "proj", None)
        head_dim = attn.o_proj.in_features // attn.n_head
        sites.append(LayerSites(block, attn.attend, attn.o_proj, mlp, down, attn.n_head, head_dim))
    return sites


def embedding_output(model: nn.Module) -> nn.Module:
    """The module whose output is the residual stream before block 0: token embedding (+ learned
    positions, classic), through dropout (the identity in eval mode)."""
    return model.dropout


def final_norm(model: nn.Module) -> nn.Module:
    return model.norm if hasattr(model, "norm") else model.ln_f


def kv_head_of(model: nn.Module) -> list[int]:
    """For each query head, the key/value head it reads (grouped-query attention shares them;
    MLA and the classic model give every head its own)."""
    config = model.config
    if config.arch == "classic" or config.attention == "mla":
        return list(range(config.n_head))
    per_group = config.n_head // config.kv_heads
    return [h // per_group for h in range(config.n_head)]


@contextmanager
def removed_after(handles: list[RemovableHandle]) -> Iterator[None]:
    """Keep the hooks for the `with` block, then take every one off (also on an exception)."""
    try:
        yield
    finally:
        for handle in handles:
            handle.remove()


def first(output: Any) -> torch.Tensor:
    """A block's or a mixture of experts' output is (tensor, auxiliary loss); anything else is the tensor."""
    return output[0] if isinstance(output, tuple) else output
