"""Activation patching: replace what flows through one site, at chosen rows and positions, by values
recorded from another run (the clean prompt), and let the rest of the forward pass run on.

Sites, as the recorders name them: "residual" at layer l is the stream entering block l (l = 0: the
embedding output; l = n_blocks: after the last block), "heads" at layer l is the input of block l's
o_proj split by head, "mlp" at layer l is what block l's MLP writes. Every row of a batch can patch
different positions (or heads), so one forward pass tries a whole row of a patching grid.
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from typing import Literal

import torch
from torch import nn

from tinylm.models.hooks.sites import embedding_output, first, layer_sites, removed_after

Site = Literal["residual", "heads", "mlp"]
SITES: tuple[str, ...] = ("residual", "heads", "mlp")


def _replace(value: torch.Tensor, where: torch.Tensor, source: torch.Tensor) -> torch.Tensor:
    """value with source where `where` is True; where broadcasts over the trailing feature dimension."""
    return torch.where(where[..., None], source.to(value.dtype), value)


@contextmanager
def patched(model: nn.Module, site: Site, layer: int, where: torch.Tensor, source: torch.Tensor) -> Iterator[None]:
    """For the next forward passes: at `site` of `layer`, take `source` where `where` is True.

    residual, mlp: where [B, T], source [B or 1, T, n_embed]; heads: where [B, T, n_head],
    source [B or 1, T, n_head, head_dim].
    """
    def swap_output(module: nn.Module, args: tuple, output: object) -> object:
        new = _replace(first(output), where, source)
        return (new, *output[1:]) if isinstance(output, tuple) else new

    def swap_heads(module: nn.Module, args: tuple) -> tuple:
        y = args[0]
        heads = y.view(*y.shape[:-1], *source.shape[-2:])
        return (_replace(heads, where, source).reshape(y.shape), *args[1:])

    if site == "residual":
        stream = embedding_output(model) if layer == 0 else model.blocks[layer - 1]
        handle = stream.register_forward_hook(swap_output)
    elif site == "mlp":
        handle = layer_sites(model)[layer].mlp.register_forward_hook(swap_output)
    elif site == "heads":
        handle = layer_sites(model)[layer].o_proj.register_forward_pre_hook(swap_heads)
    else:
        raise ValueError(f"unknown patching site {site!r}: one of {', '.join(SITES)}")
    with removed_after([handle]):
        yield
