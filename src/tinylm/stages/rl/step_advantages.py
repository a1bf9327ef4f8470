"""The step's per-token advantages [n, L-1], one tensor per micro-batch, as the algorithm computes them.

Group statistics (GRPO's mean and std, RLOO's leave-one-out mean) live inside one prompt's group, so
each micro-batch computes them alone. Whitening over "the batch" (REINFORCE++, PPO's GAE advantages)
needs the whole step: its sums are taken over every micro-batch and rank first (`moment_sums`, one
all-reduce, then `whiten`), so --grad-accum and torchrun compute what one big batch computes.
"""

from __future__ import annotations

from typing import Any

from tinylm.runtime.distributed import DistEnv, all_reduce_sum
from tinylm.stages.rl.advantages import group_advantages, moment_sums, rloo_advantages, whiten
from tinylm.stages.rl.algorithm import Algorithm
from tinylm.stages.rl.gae import gae
from tinylm.stages.rl.ppo import token_rewards


def step_advantages(micro_batches: list[dict[str, Any]], algo: Algorithm, group_size: int, gamma: float,
                    lam: float, env: DistEnv) -> None:
    """Adds "advantages" (float32, 0 off the response) to every micro-batch, and PPO's "returns"."""
    kind = algo.advantage
    for b in micro_batches:
        score = b["score"]
        if kind == "group":
            seq = group_advantages(score, group_size, scale_by_std=True)
        elif kind in ("group-mean", "group-mean-whitened"):
            seq = group_advantages(score, group_size, scale_by_std=False)
        elif kind == "rloo":
            seq = rloo_advantages(score, group_size)
        else:
            rewards = token_rewards(score, b["old_logp"], b.get("ref_logp"), b["mask"], algo.beta)
            b["advantages"], b["returns"] = gae(rewards.double(), b["old_values"].double(), b["mask"], gamma, lam)
            continue
        b["advantages"] = seq.double()[:, None] * b["mask"].double()
    if kind in ("group-mean-whitened", "gae"):
        sums = sum(moment_sums(b["advantages"], b["mask"]) for b in micro_batches)
        sums = all_reduce_sum(sums, env)
        for b in micro_batches:
            b["advantages"] = whiten(b["advantages"], sums, b["mask"])
    for b in micro_batches:
        b["advantages"] = b["advantages"].float()
        if "returns" in b:
            b["returns"] = b["returns"].float()
