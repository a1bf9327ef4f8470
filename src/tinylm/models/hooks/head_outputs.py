"""Each head's output and what it writes into the residual stream.

Attention concatenates its heads' outputs and projects them with o_proj: W_O [C, H·d] times the
concatenation is the sum over heads of W_O[:, h·d:(h+1)·d] times head h's output. So each head's
write to the stream is one slice of one matrix product, and the heads' writes (plus o_proj's bias,
if any) add up to the attention's output exactly.
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager

import torch
from torch import nn

from tinylm.models.hooks.sites import LayerSites, layer_sites, removed_after


@contextmanager
def record_head_outputs(model: nn.Module) -> Iterator[list[torch.Tensor]]:
    """Yields a list that the next forward fills with one [B, T, n_head, head_dim] tensor per layer: the
    input of o_proj, split by head (after the output gate, where the model has one)."""
    outputs: list[torch.Tensor] = []
    sites = layer_sites(model)

    def keep(index: int, site: LayerSites):
        def hook(module: nn.Module, args: tuple) -> None:
            y = args[0]
            del outputs[index:]
            outputs.append(y.detach().view(*y.shape[:-1], site.n_head, site.head_dim))
        return hook

    with removed_after([site.o_proj.register_forward_pre_hook(keep(i, site)) for i, site in enumerate(sites)]):
        yield outputs


def head_writes(site: LayerSites, outputs: torch.Tensor) -> torch.Tensor:
    """[B, T, n_head, n_embed]: each head's share of o_proj's output (its bias not included)."""
    weight = site.o_proj.weight.view(-1, site.n_head, site.head_dim)  # [C, H, d]
    return torch.einsum("bthd,chd->bthc", outputs.to(weight.dtype), weight)
