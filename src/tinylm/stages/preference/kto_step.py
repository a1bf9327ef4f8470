"""KTO's reference point z_0 as a statistic of the whole optimizer step, not of one micro-batch.

KTO scores each answer's log-ratio rho against z_0 = max(0, mean rho), which carries no gradient. Taken
per micro-batch (as `trl` takes it, per device batch), z_0 depends on how a step is cut: k micro-batches
of B rows give another gradient than one batch of kB rows, and two ranks another than one. So the DPO
stage computes it once per step, before the first backward, over every micro-batch of every rank:

    z_0 = max(0, S / n),    S = sum of rho over the step's present sides,    n = their number

with one no-grad forward per micro-batch (the engine's `Stage.begin_step` hook) and S, n all-reduced;
every micro-batch's loss then reads that one z_0, so the step's gradient is the one-big-batch gradient
at any policy. The pre-pass runs in eval mode: without dropout z_0 estimates the policy's own KL, and it
draws no random numbers, so the run's dropout noise and its bit-exact resume are untouched.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

import torch
from torch import nn

from tinylm.runtime.device import autocast
from tinylm.runtime.distributed import DistEnv, all_reduce_sum
from tinylm.stages.preference.losses import PairLogps, kto_ratio_sums, kto_reference_point

REFERENCE_POINT = "kto_reference_point"  # the batch key the step's z_0 travels under


@torch.no_grad()
def step_reference_point(model: nn.Module, batches: Sequence[Any], logps: Callable[[nn.Module, Any], PairLogps],
                         env: DistEnv, device: torch.device, dtype: torch.dtype) -> torch.Tensor:
    """z_0 over `batches` on every rank (a collective under torchrun): `logps(model, batch)` gives each batch's
    policy and reference log-probs, read in eval mode under the run's autocast."""
    sums = torch.zeros(2, dtype=torch.float64, device=device)
    was_training = model.training
    model.eval()
    try:
        for batch in batches:
            with autocast(device, dtype):
                sums += kto_ratio_sums(logps(model, batch)).double()
    finally:
        model.train(was_training)
    return kto_reference_point(all_reduce_sum(sums, env))
