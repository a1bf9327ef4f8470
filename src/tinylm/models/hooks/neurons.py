"""An MLP's neurons: the hidden activations its down projection reads (after SwiGLU's gate, ReLU², GELU)."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager

import torch
from torch import nn

from tinylm.errors import TinyLMError
from tinylm.models.hooks.sites import layer_sites, removed_after


@contextmanager
def record_neurons(model: nn.Module, layer: int) -> Iterator[list[torch.Tensor]]:
    """Yields a list that the next forward fills with the layer's activations [B, T, mlp hidden]."""
    down = layer_sites(model)[layer].mlp_down
    if down is None:
        raise TinyLMError(f"layer {layer}'s MLP is a mixture of experts: its neurons are its experts'")
    kept: list[torch.Tensor] = []

    def hook(module: nn.Module, args: tuple) -> None:
        kept[:] = [args[0].detach()]

    with removed_after([down.register_forward_pre_hook(hook)]):
        yield kept
