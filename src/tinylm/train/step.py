"""One optimizer step's worth of gradients: micro-batches, accumulation, clipping.

Gradient accumulation runs several micro-batches before one optimizer step. A stage's loss is a *sum*
over its units (target tokens, pairs...), and every micro-batch's sum is divided by the units of the
whole step, counted over all micro-batches and ranks before the first backward. The summed gradients
are then the gradient of the step's mean loss, exactly what one big batch would give, even when an
SFT micro-batch holds more assistant tokens than the next. Under DDP/FSDP the gradient all-reduce is
skipped on all but the last micro-batch: one reduction per step, not one per micro-batch.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager, nullcontext
from typing import Any

import torch
from torch import nn

from tinylm.runtime.device import autocast
from tinylm.train.distributed import is_fsdp
from tinylm.train.stage import StageLoss


@contextmanager
def skip_grad_sync(train_model: nn.Module, raw: nn.Module) -> Iterator[None]:
    """Accumulate locally without the cross-rank gradient reduction (DDP `no_sync`, FSDP2's flag)."""
    from torch.nn.parallel import DistributedDataParallel

    if isinstance(train_model, DistributedDataParallel):
        with train_model.no_sync():
            yield
    elif is_fsdp(raw):
        raw.set_requires_gradient_sync(False)  # type: ignore[operator]
        try:
            yield
        finally:
            raw.set_requires_gradient_sync(True)  # type: ignore[operator]
    else:
        yield


def accumulate_gradients(
    train_model: nn.Module,
    batches: Sequence[Any],
    loss_fn: Callable[[nn.Module, Any], StageLoss],
    total_weight: float,
    world_size: int,
    device: torch.device,
    dtype: torch.dtype,
    raw: nn.Module | None = None,
    scaler: torch.amp.GradScaler | None = None,
) -> tuple[torch.Tensor, dict[str, torch.Tensor]]:
    """Forward and backward the micro-batches into `.grad`; returns this rank's summed loss and metrics.

    `total_weight` is the step's unit count over all micro-batches and ranks; DDP averages gradients
    over ranks, hence the factor `world_size`.
    """
    raw = train_model if raw is None else raw
    total = torch.zeros((), device=device)
    metrics: dict[str, torch.Tensor] = {}
    scale = world_size / total_weight
    for i, batch in enumerate(batches):
        sync = i == len(batches) - 1
        with nullcontext() if sync else skip_grad_sync(train_model, raw):
            with autocast(device, dtype):
                out = loss_fn(train_model, batch)
            scaled = out.total * scale
            (scaler.scale(scaled) if scaler is not None else scaled).backward()
        total += out.total.detach().float()
        for key, value in out.metrics.items():
            metrics[key] = metrics.get(key, 0) + value.detach().float()
    return total, metrics


def clip_gradients(params: list[nn.Parameter], max_norm: float) -> torch.Tensor:
    """Global gradient L2 norm (before clipping), rescaling gradients to `max_norm` if above it (0 = no clip)."""
    norm = torch.nn.utils.clip_grad_norm_(params, max_norm if max_norm > 0 else float("inf"))
    full = getattr(norm, "full_tensor", None)  # a DTensor under FSDP2
    return full() if callable(full) else norm
