"""A compute budget turned into a run: how many steps a depth gets for C FLOPs, counted as tinylm counts them.

A run's FLOPs are those of every step it trains: its tokens times the training FLOPs per token of their row
length, 6N (N: the matrices every token multiplies, the tied head included) plus the attention term
6 x blocks x row length x heads x (query-key + value dims), as `models/accounting.py` states them. The
record's sequence-length warmup trains its first steps on shorter rows, whose attention is cheaper, so the
steps are found by counting the plan step by step, not by dividing the budget by one rate.

A point of a sweep is (N, D, C, loss) with N those matrix parameters, D the tokens and C the FLOPs: with the
attention term, C = 6ND + attention, a few tenths more than 6ND at context 256 (docs/scaling.md).
"""

from __future__ import annotations

import dataclasses
import functools
import json
from dataclasses import dataclass
from typing import Any

from tinylm.config import ModelConfig
from tinylm.depth import CONTEXT, DepthRule
from tinylm.models.accounting import attention_flops_per_token, matmul_params
from tinylm.models.factory import build_model
from tinylm.train.batch_plan import BatchPlan

# the record's warmups, as shares of its 600-step run: a budget's run keeps their proportions
RECORD_STEPS, RECORD_WARMUP = 600, 20
MIN_STEPS = 50  # fewer and the run is mostly warmup: its loss says more about the schedule than the size


def matrix_params(config: ModelConfig) -> int:
    """N of 6N: the non-embedding parameters plus a tied head (the matmul every token pays for)."""
    return _matrix_params(json.dumps(config.to_dict(), sort_keys=True))


@functools.cache
def _matrix_params(fields: str) -> int:  # a config's JSON: the model is built once per shape
    return matmul_params(build_model(ModelConfig.from_dict(json.loads(fields))))


def flops_per_token(config: ModelConfig, row_len: int) -> int:
    return 6 * matrix_params(config) + attention_flops_per_token(config, row_len)


def warmup_steps(steps: int) -> int:
    """The lr warmup at the record's share of the run (20 of 600 steps), at least one step."""
    return max(1, round(steps * RECORD_WARMUP / RECORD_STEPS))


def run_plan(rule: DepthRule, steps: int) -> BatchPlan:
    """The batch plan a run of `steps` steps trains by: the record's sequence warmup, a quarter of the steps
    (as `tinylm train` plans it unset: stages/pretrain/warmups.py)."""
    seq_warmup = min(150, steps // 4)
    return BatchPlan(rule.batch_size, CONTEXT, 1, 0, seq_warmup)


def run_flops(config: ModelConfig, plan: BatchPlan, steps: int) -> tuple[int, int]:
    """(tokens, FLOPs) of the first `steps` steps of `plan`: the warmup's steps one by one, then whole rows."""
    rates = {length: flops_per_token(config, length) for length in (plan.seq_len, plan.seq_len // 2,
                                                                     plan.seq_len // 4)}
    warm = min(steps, max(plan.seq_warmup_steps, plan.ramp_steps))
    tokens = flops = 0
    for step in range(warm):
        rows, length = plan.shape(step)
        tokens += rows * length * plan.per_step
        flops += rows * length * plan.per_step * rates[length]
    whole = (steps - warm) * plan.full_tokens
    return tokens + whole, flops + whole * rates[plan.seq_len]


@dataclass(frozen=True)
class BudgetRun:
    """One point of a sweep before it is trained: a depth, a budget and what the budget buys."""

    budget: float
    depth: int
    steps: int
    tokens: int
    flops: int
    params: int

    @property
    def name(self) -> str:
        return f"c{self.budget:.3g}-d{self.depth}".replace("+", "")

    def to_dict(self) -> dict[str, object]:
        return dataclasses.asdict(self)


def budget_run(depth: int, budget: float, arch: str = "modern", overrides: dict[str, Any] | None = None) -> BudgetRun:
    """The run of `depth` (with any model field `overrides`, as --set gives them) that spends `budget` FLOPs: the
    step count whose FLOPs are nearest the budget."""
    rule = DepthRule(depth)
    config = rule.model_config(arch, **(overrides or {}))
    full = rule.batch_size * CONTEXT * flops_per_token(config, CONTEXT)
    steps = max(1, round(budget / full))
    best = None
    for candidate in range(max(1, steps - 3), steps + 40):  # the warmup's cheaper rows buy a few more steps
        tokens, flops = run_flops(config, run_plan(rule, candidate), candidate)
        if best is None or abs(flops - budget) < abs(best[2] - budget):
            best = (candidate, tokens, flops)
        if flops > budget:
            break
    assert best is not None
    return BudgetRun(budget, depth, best[0], best[1], best[2], matrix_params(config))
