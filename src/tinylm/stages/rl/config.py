"""What `tinylm rl` can be told: the algorithm and its overrides, the rollouts, the reward, and RL-sized defaults.

Every field is also a command-line option (cli/commands/rl.py) and a key of a --config file. The
algorithm's own constants (clip range, KL coefficient, aggregation) live in its family's file and
are overridden here only when an option is given (`RLConfig.algorithm`).
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass

from tinylm.errors import TinyLMError
from tinylm.stages.post_config import PostTrainConfig
from tinylm.stages.rl.algorithms import Algorithm, algorithms
from tinylm.stages.rl.kl import KL_ESTIMATORS
from tinylm.stages.rl.policy_losses import AGGREGATIONS


@dataclass
class RLConfig(PostTrainConfig):
    """PostTrainConfig plus what RL needs; --batch-size counts prompts (each sampled --group-size times)."""

    task: str = "builtin:arith"
    algo: str = "grpo"
    reward: str = "exact"  # rewards.load_reward
    reference: str | None = None  # the frozen KL reference (default: the base)
    group_size: int = 8  # G responses per prompt
    max_new_tokens: int = 12
    top_p: float | None = None
    epochs: int = 1  # optimizer steps per batch of rollouts
    beta: float | None = None  # KL coefficient (default: the algorithm's)
    kl_estimator: str = "k3"
    clip_low: float | None = None
    clip_high: float | None = None
    aggregation: str | None = None  # token-mean, seq-mean-token-mean, seq-sum-constant (default: the algorithm's)
    oversample: int = 4  # DAPO dynamic sampling: prompts tried per slot before an all-equal group is kept
    overlong_buffer: int | None = None  # DAPO: the soft-penalty zone before the length limit (default limit // 4)
    gamma: float = 1.0  # PPO / GAE
    lam: float = 0.95
    vf_coef: float = 0.1
    value_clip: float = 0.2
    # RL-sized defaults of the shared options
    batch_size: int = 8
    max_steps: int = 100
    lr: float = 3e-4
    weight_decay: float = 0.0
    warmup_steps: int = 0
    schedule: str = "constant"
    eval_every: int = 10
    log_every: int = 1
    checkpoint_every: int = 0
    sample_tokens: int = 0
    temperature: float = 1.0
    top_k: int | None = None
    dtype: str = "fp32"  # the sampler's and the trainer's log-probs agree to 1e-5 in float32

    def validate(self) -> None:
        super().validate()
        known = algorithms()
        if self.algo not in known:
            raise TinyLMError(f"unknown --algo {self.algo!r}: choose one of {', '.join(known)}")
        algo = known[self.algo]
        if self.group_size < algo.min_group:
            raise TinyLMError(f"--algo {self.algo} compares responses within a group: --group-size must be >= "
                              f"{algo.min_group} (got {self.group_size})")
        if self.temperature <= 0:
            raise TinyLMError(f"RL samples its rollouts: --temperature must be > 0 (got {self.temperature})")
        if self.top_p is not None and not 0 < self.top_p <= 1:
            raise TinyLMError(f"--top-p must be in (0, 1], got {self.top_p}")
        if self.aggregation is not None and self.aggregation not in AGGREGATIONS:
            raise TinyLMError(f"unknown --aggregation {self.aggregation!r}: choose {', '.join(AGGREGATIONS)}")
        if self.kl_estimator not in KL_ESTIMATORS:
            raise TinyLMError(f"unknown --kl-estimator {self.kl_estimator!r}: choose {', '.join(KL_ESTIMATORS)}")
        for name in ("epochs", "oversample"):
            if getattr(self, name) < 1:
                raise TinyLMError(f"--{name.replace('_', '-')} must be >= 1 (got {getattr(self, name)})")
        for name in ("beta", "clip_low", "clip_high"):
            if getattr(self, name) is not None and getattr(self, name) < 0:
                raise TinyLMError(f"--{name.replace('_', '-')} must be >= 0")
        if self.fsdp:
            raise TinyLMError("tinylm rl samples with whole weights on every rank: use DDP (no --fsdp)")

    def algorithm(self) -> Algorithm:
        """The chosen algorithm with this run's overrides applied."""
        algo = algorithms()[self.algo]
        changes = {k: getattr(self, k) for k in ("beta", "clip_low", "clip_high", "aggregation")
                   if getattr(self, k) is not None}
        return dataclasses.replace(algo, **changes)
