"""Which process this is and how processes talk: torchrun's environment, the process group, collectives.

tinylm has no launcher of its own. `torchrun --nproc_per_node=N -m tinylm train ...` starts N copies
and sets RANK, LOCAL_RANK and WORLD_SIZE; this module reads them and joins the process group (NCCL on
CUDA, gloo on CPU). Every layer that sums over ranks (the trainer, the dev loss, a stage's metrics)
calls the collectives here; how the model itself is wrapped (DDP, FSDP2) is the trainer's business
(`train/distributed.py`).

Multi-node: run the same command on every node with `--nnodes=M --node_rank=I
--rdzv_backend=c10d --rdzv_endpoint=HOST:PORT` (HOST = node 0's address); nothing else changes.
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from typing import Any

import torch
import torch.distributed as dist

from tinylm.errors import TinyLMError
from tinylm.runtime.device import pick_device


@dataclass(frozen=True)
class DistEnv:
    rank: int = 0
    local_rank: int = 0
    world_size: int = 1
    backend: str | None = None

    @property
    def enabled(self) -> bool:
        return self.world_size > 1

    @property
    def is_main(self) -> bool:
        """Only rank 0 writes logs, plots and checkpoints."""
        return self.rank == 0


def launched_by_torchrun() -> bool:
    return int(os.environ.get("WORLD_SIZE", "1")) > 1


def init_distributed(device_name: str = "auto") -> tuple[DistEnv, torch.device]:
    """Join the process group if torchrun started us; returns the environment and this rank's device."""
    if not launched_by_torchrun():
        return DistEnv(), pick_device(device_name)
    rank, world = int(os.environ["RANK"]), int(os.environ["WORLD_SIZE"])
    local_rank = int(os.environ.get("LOCAL_RANK", "0"))
    wants_cuda = device_name in ("auto", "cuda") or device_name.startswith("cuda")
    if wants_cuda and torch.cuda.is_available():
        if local_rank >= torch.cuda.device_count():
            raise TinyLMError(f"local rank {local_rank} has no GPU: this node has {torch.cuda.device_count()}; "
                              "lower --nproc_per_node")
        device = torch.device("cuda", local_rank)
        torch.cuda.set_device(device)
        backend = "nccl"
    elif device_name in ("auto", "cpu"):
        device, backend = torch.device("cpu"), "gloo"
    else:
        raise TinyLMError(f"--device {device_name} is not supported with torchrun here; use auto, cuda or cpu")
    if not dist.is_initialized():
        kwargs: dict[str, Any] = {"device_id": device} if backend == "nccl" else {}
        dist.init_process_group(backend=backend, rank=rank, world_size=world, **kwargs)
    return DistEnv(rank, local_rank, world, backend), device


def all_reduce_sum(tensor: torch.Tensor, env: DistEnv) -> torch.Tensor:
    """Sum over ranks, in place; identity on one process."""
    if env.enabled:
        dist.all_reduce(tensor, op=dist.ReduceOp.SUM)
    return tensor


def all_gather_objects(obj: Any, env: DistEnv) -> list[Any]:
    """One object from every rank (for small things like RNG states), in rank order."""
    if not env.enabled:
        return [obj]
    out: list[Any] = [None] * env.world_size
    dist.all_gather_object(out, obj)
    return out


def barrier(env: DistEnv) -> None:
    if env.enabled:
        dist.barrier()


def cleanup(env: DistEnv, graceful: bool = True) -> None:
    """Leave the group together: a rank tearing gloo down while a peer still works can abort the peer.

    After an error (`graceful=False`) the peers may never arrive, so there is no barrier then.
    """
    if env.enabled and dist.is_initialized():
        if graceful:
            dist.barrier()
        dist.destroy_process_group()

