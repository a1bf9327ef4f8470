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

import contextlib
import os
import re
import time
from dataclasses import dataclass
from datetime import timedelta
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


def init_distributed(device_name: str = "auto", timeout_s: float | None = None) -> tuple[DistEnv, torch.device]:
    """Join the process group if torchrun started us; returns the environment and this rank's device.

    `timeout_s`: how long a collective waits for the other ranks (None: torch's default)."""
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
        if timeout_s is not None:
            kwargs["timeout"] = timedelta(seconds=timeout_s)
        restart = os.environ.get("TORCHELASTIC_RESTART_COUNT")
        if restart not in (None, "0"):  # a group torchrun restarted: its own keys, never the dead group's addresses
            agent_store = os.environ.get("TORCHELASTIC_USE_AGENT_STORE") == str(True)  # torchrun's agent hosts it
            store = dist.TCPStore(os.environ["MASTER_ADDR"], int(os.environ["MASTER_PORT"]), world,
                                  is_master=rank == 0 and not agent_store, multi_tenant=not agent_store,
                                  timeout=kwargs.get("timeout", timedelta(minutes=30)))
            kwargs["store"] = dist.PrefixStore(f"tinylm/attempt_{restart}", store)
        dist.init_process_group(backend=backend, rank=rank, world_size=world, **kwargs)
    return DistEnv(rank, local_rank, world, backend), device


def all_reduce_sum(tensor: torch.Tensor, env: DistEnv) -> torch.Tensor:
    """Sum over ranks, in place; identity on one process."""
    if env.enabled:
        dist.all_reduce(tensor, op=dist.ReduceOp.SUM)
    return tensor


def all_reduce_max(tensor: torch.Tensor, env: DistEnv) -> torch.Tensor:
    """Maximum over ranks, in place; identity on one process."""
    if env.enabled:
        dist.all_reduce(tensor, op=dist.ReduceOp.MAX)
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


def is_peer_failure(error: BaseException) -> bool:
    """Whether `error` is a collective that lost a peer: it gave up waiting ("Timed out"), or the peer's
    connection closed under it (a killed rank)."""
    text = str(error)
    return isinstance(error, RuntimeError) and bool(
        re.search(r"timed? ?out|timeout|connection reset|connection closed|closed by peer", text, re.IGNORECASE))


def unanswered(env: DistEnv, error: BaseException, timeout_s: float | None, wait_s: float = 5.0) -> str:
    """One line for a collective that failed on this rank, naming the ranks that did not answer.

    After a timeout gloo closes the group's connections, so the group cannot ask who is missing. The
    rendezvous store still works: every rank whose collective failed writes its name there, and rank 0
    waits `wait_s` for them. A hung rank never writes; nor does a dead one. The healthy ranks fail on
    the same collective at about the same moment, so they all arrive, and they wait until rank 0 has
    named the missing (torchrun stops every worker as soon as one exits).
    """
    waited = f"{timeout_s:g} s (--dist-timeout)" if timeout_s is not None else "torch's collective timeout"
    timed_out = re.search(r"timed? ?out|timeout", str(error), re.IGNORECASE) is not None
    head = f"the other ranks gave no answer within {waited}" if timed_out else \
        "a peer's connection closed in the middle of a collective"
    if not timed_out:  # a peer died: torchrun names it in its own report, and restarts the group if asked to
        return f"{head}: a rank died (torchrun's report names it)"
    attempt = os.environ.get("TORCHELASTIC_RESTART_COUNT", "0")
    key = f"tinylm/failed-collective/{attempt}/{{}}"
    try:
        store = dist.distributed_c10d._get_default_store()
        store.set(key.format(env.rank), "1")
    except Exception:  # no store to ask: say what this rank knows
        return f"{head}: a peer hung or died"
    named = key.format("named")
    if not env.is_main:  # stay until rank 0 has named the missing: torchrun stops every worker once one exits
        with contextlib.suppress(Exception):
            store.wait([named], timedelta(seconds=wait_s + 2))
        return f"{head}: a peer hung or died (rank 0 names it)"
    deadline = time.monotonic() + wait_s
    missing = list(range(env.world_size))
    while missing and time.monotonic() < deadline:
        missing = [r for r in missing if not store.check([key.format(r)])]
        time.sleep(0.1)
    with contextlib.suppress(Exception):
        store.set(named, "1")
    if not missing:
        return f"{head}; every rank then reported in, so none is gone: one was slow (raise --dist-timeout)"
    names = ", ".join(map(str, missing))
    return f"{head}: rank{'s' if len(missing) > 1 else ''} {names} hung or died (no word from it since)"


def cleanup(env: DistEnv, graceful: bool = True) -> None:
    """Leave the group together: a rank tearing gloo down while a peer still works can abort the peer.

    After an error (`graceful=False`) the peers may never arrive, so there is no barrier then.
    """
    if env.enabled and dist.is_initialized():
        if graceful:
            dist.barrier()
        dist.destroy_process_group()

