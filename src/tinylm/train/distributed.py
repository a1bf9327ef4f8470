"""Data parallelism through `torchrun`: DDP by default, FSDP2 (`fully_shard`) behind a flag.

The process group and the collectives are `runtime/distributed.py`'s; this module wraps the model:

- DDP keeps a full copy of the model on every rank and averages gradients during backward. Each rank
  reads different rows of the same global batch, so the averaged gradient equals the gradient of one
  process over the whole batch.
- FSDP2 shards parameters, gradients and optimizer state across ranks (each block is its own unit,
  gathered just before use), for models whose training state does not fit one device.
"""

from __future__ import annotations

import torch
from torch import nn

from tinylm.errors import TinyLMError
from tinylm.runtime.distributed import DistEnv


def wrap_model(model: nn.Module, env: DistEnv, device: torch.device, fsdp: bool = False,
               find_unused: bool = False) -> nn.Module:
    """DDP or FSDP2 around the model; the model itself on one process.

    `find_unused` is for mixtures of experts: an expert that got no token this step has no gradient,
    and DDP must be told to expect that instead of waiting for it.
    """
    if fsdp:
        from torch.distributed.fsdp import fully_shard

        if not env.enabled:
            raise TinyLMError("--fsdp shards across processes: launch with torchrun --nproc_per_node=N")
        for block in model.blocks:
            fully_shard(block)
        fully_shard(model)
        return model
    if env.enabled:
        from torch.nn.parallel import DistributedDataParallel

        return DistributedDataParallel(model, device_ids=[device.index] if device.type == "cuda" else None,
                                       find_unused_parameters=find_unused)
    return model


def unwrap(model: nn.Module) -> nn.Module:
    """The plain model inside a DDP wrapper (FSDP2 modifies the model in place: nothing to unwrap)."""
    return getattr(model, "module", model)


def is_fsdp(model: nn.Module) -> bool:
    try:
        from torch.distributed.fsdp import FSDPModule
    except ImportError:
        return False
    return isinstance(model, FSDPModule)

