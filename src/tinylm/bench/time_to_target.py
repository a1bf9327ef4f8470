"""When a run's dev curve first reaches a target: seconds, steps and tokens, read off the evaluations.

The dev loss is measured every few steps, so the crossing lies between two evaluations: the one
before it (above the target) and the first at or below it. Between them the curve is taken as a
straight line in each of seconds, steps and tokens, which is exact to the spacing of the evaluations
(the speedrun evaluates often enough that this spacing is small beside the gaps it measures). A run
that starts at or below the target reaches it at its first evaluation; one that never gets there
has no time to target (None), which a ratio counts as slower than any time.
"""

from __future__ import annotations

import math
import statistics
from collections.abc import Sequence
from typing import Any

AXES = ("train_s", "step", "tokens")


def reach(curve: Sequence[dict[str, float]], target: float, metric: str = "dev_bpb") -> dict[str, float] | None:
    """{train_s, step, tokens} where `curve` (evaluations in order) first gets to `target` or below."""
    before: dict[str, float] | None = None
    for point in curve:
        value = point[metric]
        if value <= target:
            if before is None:
                return {axis: float(point[axis]) for axis in AXES}
            share = (before[metric] - target) / (before[metric] - value)
            return {axis: before[axis] + share * (point[axis] - before[axis]) for axis in AXES}
        before = point
    return None


def ratio(new: dict[str, float] | None, reference: dict[str, float] | None, axis: str = "train_s") -> float:
    """new / reference on one axis; inf when the new run never reached the target (or the reference took 0)."""
    if new is None or reference is None or reference[axis] <= 0:
        return math.inf
    return new[axis] / reference[axis]


def median_ratio(ratios: Sequence[float]) -> float | None:
    """The median over seeds, None when most seeds never reached the target (the median is infinite)."""
    value = statistics.median(ratios)
    return None if math.isinf(value) else value


def finite_or_none(value: float) -> Any:
    """JSON has no infinity: a target never reached is written as null."""
    return None if math.isinf(value) or math.isnan(value) else value
