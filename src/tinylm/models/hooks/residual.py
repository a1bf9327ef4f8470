"""The residual stream: after the embedding, then after every block (what the logit lens reads)."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager

import torch
from torch import nn

from tinylm.models.hooks.sites import embedding_output, first, removed_after


@contextmanager
def record_residual(model: nn.Module) -> Iterator[list[torch.Tensor]]:
    """Yields a list that the next forward fills: [embedding output, after block 0, ..., after the last
    block], each [B, T, n_embed], before the final norm."""
    stream: list[torch.Tensor] = []
    sites = [embedding_output(model), *model.blocks]

    def keep(index: int):
        def hook(module: nn.Module, args: tuple, output: object) -> None:
            del stream[index:]
            stream.append(first(output).detach())
        return hook

    with removed_after([site.register_forward_hook(keep(i)) for i, site in enumerate(sites)]):
        yield stream
