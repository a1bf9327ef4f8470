"""What each block's MLP (or mixture of experts) writes into the residual stream."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager

import torch
from torch import nn

from tinylm.models.hooks.sites import first, layer_sites, removed_after


@contextmanager
def record_mlp_outputs(model: nn.Module) -> Iterator[list[torch.Tensor]]:
    """Yields a list that the next forward fills with one [B, T, n_embed] tensor per layer."""
    outputs: list[torch.Tensor] = []

    def keep(index: int):
        def hook(module: nn.Module, args: tuple, output: object) -> None:
            del outputs[index:]
            outputs.append(first(output).detach())
        return hook

    sites = layer_sites(model)
    with removed_after([site.mlp.register_forward_hook(keep(i)) for i, site in enumerate(sites)]):
        yield outputs
