"""Repeat, take the median, report the spread: the one way every benchmark here turns runs into a number.

Shared machines are noisy in bursts, so a mean is dragged by one slow repeat while the median is
not; the spread (min and max of the repeats) says how much to trust it. `interleaved` times two
or more candidates in alternation (A, B, A, B, ...) so a burst of noise hits each about equally,
which is what makes their ratio meaningful.
"""

from __future__ import annotations

import statistics
import time
from collections.abc import Callable
from dataclasses import dataclass

import torch

clock: Callable[[], float] = time.perf_counter  # tests replace it to check how figures are derived


@dataclass
class Measurement:
    """Repeated rates (units per second) of one thing; `median` is the figure, `low`/`high` the spread."""

    samples: list[float]

    @property
    def median(self) -> float:
        return statistics.median(self.samples)

    @property
    def low(self) -> float:
        return min(self.samples)

    @property
    def high(self) -> float:
        return max(self.samples)

    def to_dict(self) -> dict[str, float | list[float]]:
        return {"median": self.median, "min": self.low, "max": self.high, "samples": self.samples}

    def describe(self, unit: str = "", digits: int = 0) -> str:
        return f"{self.median:,.{digits}f}{unit} ({self.low:,.{digits}f}-{self.high:,.{digits}f})"


def synchronize(device: torch.device) -> None:
    """Wait for queued GPU work, so a timer measures the work and not just its launch."""
    if device.type == "cuda":
        torch.cuda.synchronize(device)
    elif device.type == "mps":
        torch.mps.synchronize()


def rate(work: Callable[[], object], units: float, device: torch.device, iterations: int = 1) -> float:
    """units * iterations per second of `work()` run `iterations` times."""
    synchronize(device)
    start = clock()
    for _ in range(iterations):
        work()
    synchronize(device)
    return units * iterations / max(clock() - start, 1e-12)


def interleaved(
    candidates: dict[str, tuple[Callable[[], object], float]],
    device: torch.device,
    repeats: int,
    warmup: int = 1,
    iterations: int = 1,
) -> dict[str, Measurement]:
    """Measure each {name: (work, units per call)} `repeats` times in alternation after `warmup` calls each."""
    for work, _ in candidates.values():
        for _ in range(warmup):
            work()
    samples: dict[str, list[float]] = {name: [] for name in candidates}
    for _ in range(repeats):
        for name, (work, units) in candidates.items():
            samples[name].append(rate(work, units, device, iterations))
    return {name: Measurement(values) for name, values in samples.items()}


def ratio(a: Measurement | None, b: Measurement | None) -> float | None:
    """median(a) / median(b), the headline of every side-by-side figure (None if either is missing)."""
    if a is None or b is None or b.median <= 0:
        return None
    return a.median / b.median
