"""The frozen reference model pi_ref of the DPO family, three ways, from most to least memory:

- `copy`: a second, frozen model beside the policy, run forward on every batch (what most toolkits do):
  twice the weights in memory and two forwards a step.
- `cached`: pi_ref never changes, so its answer log-probs are a fixed number per pair. They are computed
  once, before the first step, for every training and held-out pair (batched, no gradients) and stored
  beside the rows; a step then costs one policy forward and no second model is kept.
- `adapters` (with LoRA): the policy is the frozen base plus adapters, so the base *is* the reference:
  the same forward with every adapter's scale set to 0 (`adapters_disabled`), no copy in memory.

All three give the same numbers (tests/test_dpo.py); benchmarks/bench_dpo_reference.py measures the
step time and peak memory of each.
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager

import torch
from torch import nn

from tinylm.models.lora import lora_modules
from tinylm.runtime.device import autocast
from tinylm.stages.preference.sequence_logprobs import pair_logprobs

MODES = ("cached", "copy", "adapters")


@contextmanager
def adapters_disabled(model: nn.Module) -> Iterator[nn.Module]:
    """`model` computing as its base: every LoRALinear's update scaled by 0 (restored on exit), eval mode."""
    adapters = [module for _, module in lora_modules(model)]
    scales = [module.scale for module in adapters]
    was_training = model.training
    for module in adapters:
        module.scale = 0.0
    model.eval()
    try:
        yield model
    finally:
        for module, scale in zip(adapters, scales, strict=True):
            module.scale = scale
        model.train(was_training)


@torch.no_grad()
def reference_logprobs(reference: nn.Module, batch: dict[str, torch.Tensor]) -> tuple[torch.Tensor, torch.Tensor]:
    """(chosen, rejected) summed answer log-probs of a batch under a frozen model in eval mode."""
    was_training = reference.training
    reference.eval()
    try:
        chosen, rejected, _, _ = pair_logprobs(reference, batch)
    finally:
        reference.train(was_training)
    return chosen, rejected


def cache_reference_logprobs(reference: nn.Module, rows: dict[str, torch.Tensor], batch_size: int,
                             device: torch.device, dtype: torch.dtype) -> dict[str, torch.Tensor]:
    """`rows` plus ref_chosen / ref_rejected [N] (float32, on the CPU), computed in batches on `device`."""
    if not rows:
        return rows
    chosen, rejected = [], []
    n = len(rows["chosen_ids"])
    for first in range(0, n, batch_size):
        batch = {k: v[first:first + batch_size].to(device) for k, v in rows.items()}
        with autocast(device, dtype):
            c, r = reference_logprobs(reference, batch)
        chosen.append(c.float().cpu())
        rejected.append(r.float().cpu())
    return {**rows, "ref_chosen": torch.cat(chosen), "ref_rejected": torch.cat(rejected)}
