"""The step's totals: loss units, response tokens and the logged means, over every micro-batch and rank.

The engine divides a step's summed loss by its units, and the loss scales its token sums by the
step's response tokens, so both counts must be the whole step's before the first loss runs. They are
summed here once per round, in one all-reduce, with the numbers the log shows per step (mean reward,
accuracy, response length, the share of informative groups, rollout and update time).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import torch

from tinylm.runtime.distributed import DistEnv, all_reduce_sum


@dataclass
class StepTotals:
    units: float = 0.0  # W: the step's loss units (policy_losses.units), all micro-batches and ranks
    tokens: float = 1.0  # T: the step's response tokens (at least 1)
    metrics: dict[str, float] = field(default_factory=dict)  # the step's logged means; empty before any round


def step_totals(micro_batches: list[dict[str, Any]], groups: list[dict[str, Any]], rollout_s: float,
                update_s: float, env: DistEnv, device: torch.device, tools: bool = False,
                teacher: bool = False) -> StepTotals:
    """Sums over this rank's micro-batches (and its groups, for the sampling counts), then over the ranks;
    with `tools`, the calls per rollout and the failed ones too; with a `teacher`, the reverse KL to it."""
    local = torch.tensor([
        sum(float(b["units"]) for b in micro_batches),  # each micro-batch's, counted once (collect.py)
        sum(float(b["mask"].sum()) for b in micro_batches),
        sum(float(b["reward"].sum()) for b in micro_batches),
        sum(float(b["correct"].sum()) for b in micro_batches),
        sum(float(b["reward"].numel()) for b in micro_batches),
        sum(float(g["tokens"]) for g in groups),
        sum(float((~b["stopped"]).sum()) for b in micro_batches),
        float(sum(g["informative"] for g in groups)), float(len(groups)),
        float(sum(g["failures"] for g in groups)), rollout_s, update_s,
        float(sum(g.get("calls", 0) for g in groups)), float(sum(g.get("failed_calls", 0) for g in groups)),
        sum(float(g["teacher_kl"].sum()) for g in groups if "teacher_kl" in g),
    ], dtype=torch.float64, device=device)
    t = all_reduce_sum(local, env).tolist()
    ws = env.world_size
    W, T, reward, correct, n, generated, truncated, informative, n_groups, failures = t[:10]
    rollout_s, update_s = t[10] / ws, t[11] / ws
    metrics = {"reward": reward / n, "accuracy": correct / n, "response_length": generated / n,
               "truncated_frac": truncated / n, "informative_frac": informative / n_groups,
               "reward_failures": failures, "rollout_s": rollout_s, "update_s": update_s,
               "rollout_tokens_per_s": generated / max(rollout_s, 1e-9)}
    if tools:
        metrics |= {"tool_calls": t[12] / n, "failed_calls": t[13] / n}
    if teacher:  # per response token, as the divergence of `tinylm distill` is logged
        metrics["teacher_kl"] = t[14] / max(generated, 1.0)
    return StepTotals(W, max(T, 1.0), metrics)
