"""Pretraining's batch plan: the batch-size ramp and the sequence-length warmup it draws its rows by.

The plan itself (train/batch_plan.py) is the engine's: it counts tokens by it. What to put in it is
pretraining's: `--batch-ramp-steps`, `--seq-len-warmup-steps`, and the record's warmup when none is given.
"""

from __future__ import annotations

import dataclasses

from tinylm.stages.pretrain.config import DEFAULT_SEQ_WARMUP_STEPS, PretrainConfig
from tinylm.train.batch_plan import BatchPlan
from tinylm.train.run_setup import schedule_steps


def pretraining_plan(cfg: PretrainConfig, seq_len: int, world_size: int) -> BatchPlan:
    """The run's step shapes: the ramp and warmup as given, or the default sequence warmup when unset (none for
    a context extension, whose long rows are its point)."""
    plan = BatchPlan(cfg.batch_size, seq_len, cfg.grad_accum * world_size, cfg.batch_ramp_steps,
                     cfg.seq_len_warmup_steps or 0)
    if cfg.seq_len_warmup_steps is None and cfg.extend is not None:
        return dataclasses.replace(plan, note="sequence warmup: none (a context extension learns from its long rows "
                                              "from the first step; --seq-len-warmup-steps N to have one)")
    if cfg.seq_len_warmup_steps is None:
        plan = default_seq_warmup(plan, schedule_steps(cfg, plan))
    return plan


def default_seq_warmup(plan: BatchPlan, schedule_steps: int) -> BatchPlan:
    """The sequence warmup when --seq-len-warmup-steps is not given: the record's 150 steps (of the 600 that
    docs/speedrun.md raced), at most a quarter of the lr schedule, so a short run still learns mostly on the
    whole rows it is evaluated on; none where the rows cannot be quartered. Tied to the schedule, not
    --max-steps, so a run stopped early and resumed with more steps plans the same warmup."""
    steps = min(DEFAULT_SEQ_WARMUP_STEPS, schedule_steps // 4)
    if plan.seq_len % 4:
        return dataclasses.replace(plan, note=f"sequence warmup: none (rows of {plan.seq_len} tokens cannot be "
                                              "quartered)")
    note = "" if steps == DEFAULT_SEQ_WARMUP_STEPS else (
        f"sequence warmup: {steps} steps, not {DEFAULT_SEQ_WARMUP_STEPS}: unset, it is at most a quarter of the "
        f"{schedule_steps}-step lr schedule")
    return dataclasses.replace(plan, seq_warmup_steps=steps, note=note)
