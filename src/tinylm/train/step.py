"""One optimizer step's worth of gradients: micro-batches, accumulation, clipping.

Gradient accumulation runs `n` micro-batches before one optimizer step. Each micro-batch loss is a
mean over its own tokens, so dividing it by `n` before `backward` makes the summed gradients equal
the gradient of the mean loss over all `n` micro-batches, exactly what one big batch would give
(micro-batches of packed text all have the same number of target tokens). Under DDP/FSDP the
gradient all-reduce is skipped on all but the last micro-batch: one reduction per step, not `n`.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from contextlib import contextmanager, nullcontext

import torch
from torch import nn

from tinylm.device import autocast
from tinylm.train.distributed import is_fsdp

Batch = tuple[torch.Tensor, torch.Tensor]


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
    next_batch: Callable[[], Batch],
    n_micro: int,
    device: torch.device,
    dtype: torch.dtype,
    raw: nn.Module | None = None,
    scaler: torch.amp.GradScaler | None = None,
) -> torch.Tensor:
    """Forward and backward `n_micro` micro-batches into `.grad`; returns the mean loss (detached)."""
    raw = train_model if raw is None else raw
    total = torch.zeros((), device=device)
    for i in range(n_micro):
        x, y = next_batch()
        sync = i == n_micro - 1
        with nullcontext() if sync else skip_grad_sync(train_model, raw):
            with autocast(device, dtype):
                _, loss = train_model(x, y, return_logits=False)  # chunked loss: no full logits
            scaled = loss / n_micro
            (scaler.scale(scaled) if scaler is not None else scaled).backward()
        total += loss.detach().float()
    return total / n_micro


def clip_gradients(params: list[nn.Parameter], max_norm: float) -> torch.Tensor:
    """Global gradient L2 norm (before clipping), rescaling gradients to `max_norm` if above it (0 = no clip)."""
    norm = torch.nn.utils.clip_grad_norm_(params, max_norm if max_norm > 0 else float("inf"))
    full = getattr(norm, "full_tensor", None)  # a DTensor under FSDP2
    return full() if callable(full) else norm
