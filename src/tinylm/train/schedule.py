"""Learning-rate schedules as pure functions of the step: warmup + cosine, WSD, linear, constant.

A schedule returns a multiplier in [0, 1] for the base learning rate of every parameter group. It
depends only on the step number and its own settings, never on hidden state, which is what makes
exact resume trivial: the step restored from a checkpoint gives back the same learning rate.

- warmup: the first `warmup` steps ramp linearly from 1/warmup to 1 (a fresh Adam's second-moment
  estimate is noisy; small early steps keep it from throwing the weights far off).
- cosine: after warmup, `min_ratio + (1 - min_ratio) * (1 + cos(pi * t)) / 2`, t from 0 to 1.
- wsd (warmup-stable-decay): hold 1 until the last `decay_fraction` of the steps, then decay linearly
  to `min_ratio`. The stable phase can be stopped anywhere and decayed later, so one long run gives
  checkpoints for many budgets.
- linear: after warmup, straight line from 1 to `min_ratio`.
- constant: 1 after warmup.

The last update of the schedule (step `total - 1`) lands exactly on `min_ratio` for the decaying kinds.
Past `total` steps (a run continued beyond its schedule) the multiplier stays at its final value.

Under a time budget the run ends at whichever comes first, its steps or its seconds, so the schedule is
planned against both: its position is the larger of the step and `total` times the share of the budget
spent. On a machine that finishes the steps in time that is the step, as without a budget; on one half
as fast the clock leads, and the decay still runs in the last `decay_fraction` of the seconds instead of
being cut off. The share of the budget is counted across resumes (the checkpoint keeps it).
"""

from __future__ import annotations

import math
from dataclasses import asdict, dataclass
from typing import Any

from tinylm.errors import TinyLMError

SCHEDULES: tuple[str, ...] = ("cosine", "wsd", "linear", "constant")
WEIGHT_DECAY_SCHEDULES: tuple[str, ...] = ("constant", "linear")


@dataclass(frozen=True)
class LRSchedule:
    kind: str = "cosine"
    total: int = 1000
    warmup: int = 0
    min_ratio: float = 0.1
    decay_fraction: float = 0.2
    time_budget: float | None = None  # seconds; the schedule then also follows the clock (see above)

    def __post_init__(self) -> None:
        if self.kind not in SCHEDULES:
            raise TinyLMError(f"unknown schedule {self.kind!r}: choose one of {', '.join(SCHEDULES)}")
        if self.total < 1:
            raise TinyLMError(f"schedule length must be >= 1 step (got {self.total})")
        if not 0 <= self.warmup <= self.total:
            raise TinyLMError(f"warmup steps must be in [0, {self.total}] (got {self.warmup})")
        if not 0.0 <= self.min_ratio <= 1.0:
            raise TinyLMError(f"min lr ratio must be in [0, 1] (got {self.min_ratio})")
        if not 0.0 < self.decay_fraction <= 1.0:
            raise TinyLMError(f"decay fraction must be in (0, 1] (got {self.decay_fraction})")

    def factor(self, step: int, seconds: float | None = None) -> float:
        """Multiplier for the update number `step` (0-based: the first optimizer step is step 0); `seconds`:
        the run's training time at the end of this update, which counts only under a time budget."""
        if step < self.warmup:
            return (step + 1) / self.warmup
        position = float(step) if seconds is None else self.position(step, seconds)
        if self.kind == "constant":
            return 1.0
        if self.kind == "wsd":
            decay_steps = max(1, round(self.decay_fraction * (self.total - self.warmup)))
            start = self.total - decay_steps
            if position < start:
                return 1.0
            t = min(1.0, (position - start + 1) / decay_steps)
            return 1.0 - (1.0 - self.min_ratio) * t
        span = self.total - self.warmup - 1  # the last update (step total-1) lands exactly on min_ratio
        t = 1.0 if span <= 0 else min(1.0, (position - self.warmup) / span)
        if self.kind == "linear":
            return 1.0 - (1.0 - self.min_ratio) * t
        return self.min_ratio + (1.0 - self.min_ratio) * 0.5 * (1.0 + math.cos(math.pi * t))

    def position(self, step: int, seconds: float) -> float:
        """Where the run is in its schedule, in steps: the step, or the budget's share of `total` if further."""
        if self.time_budget is None:
            return float(step)
        return max(float(step), min(1.0, seconds / self.time_budget) * self.total)

    def describe(self) -> str:
        """One header line: the plan, and what a time budget does to it."""
        plan = f"schedule: {self.kind} over {self.total:,} steps"
        if self.warmup:
            plan += f" after {self.warmup:,} warmup steps"
        if self.time_budget is None:
            return plan
        return (f"{plan} or the --time-budget of {self.time_budget:g} s, whichever ends first: the lr follows the "
                "clock when it leads, so the decay happens inside the budget (a run stopped by the clock is "
                "not bit-reproducible)")

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> LRSchedule:
        return cls(**data)


def weight_decay_factor(kind: str, position: float, total: int) -> float:
    """Multiplier of the weight-decay coefficient at schedule position `position` (in steps).

    Decoupled decay shrinks each weight by lr x coefficient per step, so with a constant coefficient the decay
    already follows the lr schedule. `linear` also takes the coefficient from its value at step 0 to zero at
    the schedule's last update: late in a run, when the lr is small and the weights should settle where the
    data puts them, the pull toward zero fades first."""
    if kind == "constant":
        return 1.0
    if kind != "linear":
        raise TinyLMError(f"unknown weight-decay schedule {kind!r}: choose one of {', '.join(WEIGHT_DECAY_SCHEDULES)}")
    return max(0.0, 1.0 - position / max(1, total - 1))


def apply_weight_decay(optimizer: Any, factor: float) -> None:
    """Set every group's weight decay to its base (`initial_weight_decay`, fixed when built) times factor."""
    for group in optimizer.param_groups:
        group["weight_decay"] = group["initial_weight_decay"] * factor


def apply_schedules(optimizer: Any, schedule: LRSchedule, weight_decay_schedule: str, step: int,
                    seconds: float | None) -> None:
    """Before update `step`: every group's lr from the schedule, and its weight decay when that has a schedule
    too (`constant` leaves the groups alone, so a run without one is what it always was)."""
    apply_lr(optimizer, schedule.factor(step, seconds))
    if weight_decay_schedule != "constant":
        position = step if seconds is None else schedule.position(step, seconds)
        apply_weight_decay(optimizer, weight_decay_factor(weight_decay_schedule, position, schedule.total))


def apply_lr(optimizer: Any, factor: float) -> None:
    """Set every group's lr to its base lr (`initial_lr`, fixed when the optimizer was built) times factor."""
    for group in optimizer.param_groups:
        group["lr"] = group["initial_lr"] * factor
