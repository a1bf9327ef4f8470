"""A decision every process of a torchrun job must share: rank 0 makes it, the others receive it.

Measured policies (bf16 or fp32, compile or not) can come out differently on two processes of the
same job: timings are noisy and each rank has its own slice of the machine. Ranks that train in
different dtypes or with different graphs would still all-reduce, silently mixing them. So a
measured decision is taken once, on rank 0, and broadcast; a single process just decides.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TypeVar

T = TypeVar("T")


def decided_on_rank0(decide: Callable[[], T]) -> T:
    """`decide()` on rank 0 (or in a single process); every other rank gets rank 0's result."""
    import torch.distributed as dist

    if not (dist.is_available() and dist.is_initialized() and dist.get_world_size() > 1):
        return decide()
    box: list[object] = [decide() if dist.get_rank() == 0 else None]
    dist.broadcast_object_list(box, src=0)
    return box[0]  # type: ignore[return-value]
