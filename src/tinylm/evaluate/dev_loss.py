"""Dev-set loss and bits per byte, the numbers that say whether a run is getting better.

Loss per token depends on the tokenizer: a tokenizer with longer tokens has fewer, harder tokens.
Bits per byte removes that: the total information the model needs for the dev text, divided by the
text's size in bytes,

    bpb = loss_nats_per_token * tokens / (bytes * ln 2)

using the dev shard's own token and byte counts, so runs with different tokenizers compare.

The dev windows are read in order (no sampling), so every evaluation of every run sees the same text.
Under torchrun each rank takes every world_size-th batch and the sums are all-reduced.
"""

from __future__ import annotations

import math
from collections.abc import Iterable

import torch
from torch import nn

from tinylm.runtime.device import autocast
from tinylm.runtime.distributed import DistEnv, all_reduce_sum


def bits_per_byte(loss_nats: float, tokens: int, n_bytes: int) -> float:
    """Nats per token -> bits per byte of the underlying text."""
    if n_bytes <= 0:
        raise ValueError("bits_per_byte needs a positive byte count")
    return loss_nats * tokens / (n_bytes * math.log(2))


@torch.no_grad()
def evaluate(model: nn.Module, batches: Iterable[tuple[torch.Tensor, torch.Tensor]], device: torch.device,
             dtype: torch.dtype, env: DistEnv | None = None) -> float:
    """Mean cross-entropy (nats/token) over all target tokens of the batches, in eval mode.

    `batches` must already be this rank's share; every rank must run the same number of batches
    (sharded models gather weights in every forward).
    """
    env = env or DistEnv()
    was_training = model.training
    model.eval()
    totals = torch.zeros(2, dtype=torch.float64, device=device)  # [sum of losses, number of targets]
    for x, y in batches:
        x, y = x.to(device, non_blocking=True), y.to(device, non_blocking=True)
        with autocast(device, dtype):
            _, loss = model(x, y, return_logits=False)
        count = (y != -1).sum()
        totals[0] += loss.double() * count
        totals[1] += count
    model.train(was_training)
    all_reduce_sum(totals, env)
    if totals[1] == 0:
        raise ValueError("evaluation saw no target tokens (is the dev shard empty?)")
    return float(totals[0] / totals[1])
