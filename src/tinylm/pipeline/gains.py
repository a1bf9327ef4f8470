"""A stage's gain in exact-match over the stage before it, with the 95% interval of that measurement.

Both models answer the same n held-out problems, so the gain is a paired difference: with `b` problems
the later model gets right and the earlier one wrong, and `c` the other way round, the gain is
d = (b - c) / n and, for n large, its standard error is sqrt(((b + c) / n - d^2) / n). The interval is
d ± 1.96 standard errors: a gain whose interval excludes zero is more than the luck of which problems
were drawn. Pairing matters: two models that agree on most problems differ by less noise than two
independent samples would (the unpaired interval, the fallback when the per-problem outcomes are
missing, is 1.96 sqrt(p1 (1 - p1) / n + p2 (1 - p2) / n)).

It measures the noise of the evaluation, not of training: another seed trains another model, which is
why the docs' table gives three seeds.
"""

from __future__ import annotations

import math
from dataclasses import asdict, dataclass
from typing import Any

Z95 = 1.959964  # the normal quantile of a two-sided 95% interval


@dataclass(frozen=True)
class Gain:
    points: float  # the change in exact-match, in [-1, 1]
    interval: float  # half-width of its 95% interval
    paired: bool

    @property
    def beyond_noise(self) -> bool:
        return abs(self.points) > self.interval

    def format(self) -> str:
        return f"{100 * self.points:+.1f} ± {100 * self.interval:.1f}"

    def to_dict(self) -> dict[str, Any]:
        return {**asdict(self), "beyond_noise": self.beyond_noise}


def paired_gain(before: str, after: str) -> Gain:
    """The gain from per-problem outcomes ('1' right, '0' wrong), the same problems in the same order."""
    if len(before) != len(after) or not before:
        raise ValueError(f"paired outcomes need the same problems: {len(before)} and {len(after)}")
    n = len(before)
    b = sum(x == "0" and y == "1" for x, y in zip(before, after))
    c = sum(x == "1" and y == "0" for x, y in zip(before, after))
    d = (b - c) / n
    return Gain(d, Z95 * math.sqrt(max(0.0, (b + c) / n - d * d) / n), paired=True)


def unpaired_gain(before: float, after: float, n: int) -> Gain:
    """The gain from two shares alone, each measured on n problems (wider: it ignores the pairing)."""
    return Gain(after - before, Z95 * math.sqrt((before * (1 - before) + after * (1 - after)) / n), paired=False)


def stage_gains(rows: list[dict[str, Any]], task: str, held_out: int | None) -> list[Gain | None]:
    """Each row's gain over the row before on `task` (None for the first row or an unmeasured one)."""
    gains: list[Gain | None] = [None]
    for previous, row in zip(rows, rows[1:]):
        before, after = (r.get("outcomes", {}).get(task) for r in (previous, row))
        p1, p2 = (r["scores"].get(task, {}).get("exact_match") for r in (previous, row))
        if before and after and len(before) == len(after):
            gains.append(paired_gain(before, after))
        elif p1 is not None and p2 is not None and held_out:
            gains.append(unpaired_gain(p1, p2, held_out))
        else:
            gains.append(None)
    return gains
