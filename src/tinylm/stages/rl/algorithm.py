"""What distinguishes one RL algorithm from another, as data: the stage (stages/rl/stage.py) runs them all.

Every algorithm here samples G responses per prompt, turns rewards into per-token advantages, and
minimises a clipped surrogate (plus a KL term or a value loss) aggregated one of three ways. They
differ only in the fields below; the formulas live in advantages.py, gae.py, policy_losses.py and kl.py.
Each family's file (grpo.py, rloo.py, reinforce_pp.py, ppo.py) holds its rows; algorithms.py registers them.
"""

from __future__ import annotations

from dataclasses import dataclass

ADVANTAGES = ("group", "group-mean", "rloo", "group-mean-whitened", "gae")


@dataclass(frozen=True)
class Algorithm:
    name: str
    advantage: str  # one of ADVANTAGES
    aggregation: str  # policy_losses.AGGREGATIONS
    clip_low: float = 0.2
    clip_high: float = 0.2  # > clip_low: DAPO's clip-higher
    beta: float = 0.0  # KL coefficient (in the loss; PPO: in the per-token reward)
    sequence_ratio: bool = False  # GSPO: one importance ratio per sequence
    dynamic_sampling: bool = False  # DAPO: replace groups whose rewards are all equal
    overlong_shaping: bool = False  # DAPO: a soft penalty for responses near the length limit
    value_head: bool = False  # PPO
    min_group: int = 2  # samples per prompt the advantage needs
    summary: str = ""
