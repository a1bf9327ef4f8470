"""Every head's attention probabilities, softmax(q kᵀ · scale, masked), from the q and k the model used.

The fused kernel never materializes them; a hook on `Attend` (models/attend.py) receives the rotated
queries, the keys already expanded to one per query head, the mask and the scale, and computes the
softmax that kernel computes internally, in float32.
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager

import torch
from torch import nn

from tinylm.models.hooks.sites import layer_sites, removed_after


def attention_probabilities(q: torch.Tensor, k: torch.Tensor, mask: torch.Tensor | None, is_causal: bool,
                            scale: float | None) -> torch.Tensor:
    """[B, H, T, S]: what `F.scaled_dot_product_attention(q, k, v, mask, is_causal, scale=scale)` weights v by."""
    scale = q.shape[-1] ** -0.5 if scale is None else scale
    scores = (q.float() @ k.float().transpose(-2, -1)) * scale
    T, S = scores.shape[-2:]
    if is_causal:  # query i (the last T of S slots) sees keys up to its own slot
        mask = torch.ones(T, S, dtype=torch.bool, device=q.device).tril(S - T)
    if mask is not None:
        scores = scores.masked_fill(~mask, float("-inf"))
    return torch.softmax(scores, dim=-1)


@contextmanager
def record_attention(model: nn.Module) -> Iterator[list[torch.Tensor]]:
    """Yields a list that the next forward fills with one [B, n_head, T, S] tensor per layer."""
    patterns: list[torch.Tensor] = []

    def keep(index: int):
        def hook(module: nn.Module, args: tuple, output: object) -> None:
            q, k, _v, mask, is_causal, scale = args[:6]
            del patterns[index:]
            patterns.append(attention_probabilities(q, k, mask, is_causal, scale).detach())
        return hook

    sites = layer_sites(model)
    with removed_after([site.attend.register_forward_hook(keep(i)) for i, site in enumerate(sites)]):
        yield patterns
