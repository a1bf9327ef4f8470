"""Muon: momentum SGD whose update is orthogonalized by Newton–Schulz iterations (Keller Jordan, 2024).

For a weight matrix, the raw momentum is dominated by a few directions (a few huge singular values);
Muon replaces it by the nearest semi-orthogonal matrix U V^T (all singular values ~1), so every
direction of the update moves at the same rate. Computing U V^T with an SVD is slow; an odd matrix
polynomial iterated a few times gets close enough:

    X <- a X + (b A + c A^2) X,   A = X X^T,   (a, b, c) = (3.4445, -4.7750, 2.0315)

This quintic pushes singular values from (0, 1] quickly toward 1 without converging exactly: after
5 steps they land in roughly [0.7, 1.2], which trains as well as the exact polar factor. X starts as
G / ||G||_F so that every singular value is <= 1.

Muon is only for hidden 2-D (or batched 2-D) matrices; embeddings, the output head and 1-D
parameters (norm gains, biases) go to AdamW (see `optim.py`).

Under FSDP2 each rank holds a block of every matrix's rows, and U V^T of a matrix is not its blocks'
own: each rank gathers the whole momentum direction, orthogonalises it (every rank gets the same
result) and keeps its own rows. That repeats the Newton-Schulz work on every rank, which is simple
and exact; a large run would hand each rank a share of the matrices instead.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

import torch

NS_COEFFS: tuple[float, float, float] = (3.4445, -4.7750, 2.0315)


def newton_schulz(g: torch.Tensor, steps: int = 5, eps: float = 1e-7, dtype: torch.dtype | None = None) -> torch.Tensor:
    """Approximate U V^T of `g` (last two dims; leading dims are a batch) with the quintic iteration."""
    if g.ndim < 2:
        raise ValueError(f"newton_schulz needs a matrix, got shape {tuple(g.shape)}")
    a, b, c = NS_COEFFS
    x = g.to(dtype or torch.float32)
    transposed = x.size(-2) > x.size(-1)
    if transposed:  # iterate on the small Gram matrix X X^T
        x = x.mT
    x = x / (x.norm(dim=(-2, -1), keepdim=True) + eps)
    for _ in range(steps):
        gram = x @ x.mT
        x = a * x + (b * gram + c * gram @ gram) @ x
    if transposed:
        x = x.mT
    return x.to(g.dtype)


def _is_dtensor(tensor: torch.Tensor) -> bool:
    try:
        from torch.distributed.tensor import DTensor
    except ImportError:  # a build without torch.distributed
        return False
    return isinstance(tensor, DTensor)


class Muon(torch.optim.Optimizer):
    """Nesterov momentum, orthogonalized per matrix, scaled by sqrt(max(1, rows / cols)).

    The scale keeps the per-element update size comparable for tall matrices (an orthogonal
    update of a tall matrix has small entries). Weight decay is decoupled, as in AdamW.
    """

    def __init__(
        self,
        params: Iterable[Any],
        lr: float = 0.02,
        momentum: float = 0.95,
        nesterov: bool = True,
        weight_decay: float = 0.0,
        ns_steps: int = 5,
        ns_dtype: torch.dtype | None = None,
    ) -> None:
        if lr <= 0 or not 0 <= momentum < 1 or weight_decay < 0 or ns_steps < 1:
            raise ValueError("Muon needs lr > 0, 0 <= momentum < 1, weight_decay >= 0, ns_steps >= 1")
        defaults = dict(lr=lr, momentum=momentum, nesterov=nesterov, weight_decay=weight_decay, ns_steps=ns_steps)
        super().__init__(params, defaults)
        self.ns_dtype = ns_dtype
        for group in self.param_groups:
            for p in group["params"]:
                if p.ndim < 2:
                    raise ValueError(f"Muon only takes matrices; got a parameter of shape {tuple(p.shape)}")

    def _orthogonalise(self, direction: torch.Tensor, steps: int) -> torch.Tensor:
        """U V^T of the whole matrix; a sharded one (an FSDP2 DTensor) is gathered and this rank's rows kept."""
        if not _is_dtensor(direction):
            return newton_schulz(direction, steps, dtype=self.ns_dtype)
        from torch.distributed.tensor import distribute_tensor

        whole = newton_schulz(direction.full_tensor(), steps, dtype=self.ns_dtype)  # type: ignore[attr-defined]
        # the same `whole` on every rank, so each takes its shard locally (src_data_rank=None: no scatter)
        return distribute_tensor(whole, direction.device_mesh, direction.placements,  # type: ignore[attr-defined]
                                 src_data_rank=None)

    @torch.no_grad()
    def step(self, closure: Any = None) -> Any:
        loss = None
        if closure is not None:
            with torch.enable_grad():
                loss = closure()
        for group in self.param_groups:
            beta = group["momentum"]
            for p in group["params"]:
                if p.grad is None:
                    continue
                state = self.state[p]
                if "momentum_buffer" not in state:
                    state["momentum_buffer"] = torch.zeros_like(p)
                buf = state["momentum_buffer"]
                buf.lerp_(p.grad, 1 - beta)
                direction = p.grad.lerp(buf, beta) if group["nesterov"] else buf
                update = self._orthogonalise(direction, group["ns_steps"])
                scale = max(1.0, p.size(-2) / p.size(-1)) ** 0.5
                if group["weight_decay"]:
                    p.mul_(1 - group["lr"] * group["weight_decay"])
                p.add_(update, alpha=-group["lr"] * scale)
        return loss
