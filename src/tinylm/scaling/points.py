"""Points of a scaling study: (N parameters, D tokens, final loss L, and C FLOPs when known), one JSON row each.

`tinylm scaling` writes them as its runs finish (RUN/points.jsonl); `tinylm scaling fit --points FILE` reads
them from any source, so a sweep run elsewhere (or a paper's table) can be fitted the same way. A row is
refused with its file and line when a field is missing, not a number, not finite or not positive: a fit
would otherwise turn one bad row into a confident wrong law.
"""

from __future__ import annotations

import json
import math
import statistics
from dataclasses import dataclass
from pathlib import Path

from tinylm.errors import TinyLMError

REQUIRED = ("params", "tokens", "loss")
CURVE_TOLERANCE = 0.05  # points whose FLOPs differ by less than 5% are one IsoFLOP curve


@dataclass(frozen=True)
class Point:
    params: float
    tokens: float
    loss: float
    flops: float  # given, else 6ND

    @property
    def given(self) -> dict[str, float]:
        return {"params": self.params, "tokens": self.tokens, "loss": self.loss, "flops": self.flops}


def _number(row: dict, key: str, where: str) -> float:
    value = row.get(key)
    if value is None:
        raise TinyLMError(f"{where}: missing field {key!r} (each row needs {', '.join(REQUIRED)}; flops optional)")
    if isinstance(value, bool) or not isinstance(value, int | float):
        raise TinyLMError(f"{where}: {key} must be a number (got {value!r})")
    if not math.isfinite(value) or value <= 0:
        raise TinyLMError(f"{where}: {key} must be finite and positive (got {value!r})")
    return float(value)


def read_points(path: str | Path) -> list[Point]:
    """Every row of a JSONL points file, checked (file:line on the first bad one)."""
    file = Path(path)
    if not file.is_file():
        raise TinyLMError(f"{file}: no such points file")
    points = []
    with file.open(encoding="utf-8") as handle:
        for number, line in enumerate(handle, 1):
            if not line.strip():
                continue
            where = f"{file}:{number}"
            try:
                row = json.loads(line, parse_constant=lambda name: float(name))  # NaN/Infinity: refused below
            except json.JSONDecodeError as error:
                raise TinyLMError(f"{where}: not a JSON object ({error.msg})") from None
            if not isinstance(row, dict):
                raise TinyLMError(f"{where}: not a JSON object")
            n, d, loss = (_number(row, key, where) for key in REQUIRED)
            flops = _number(row, "flops", where) if row.get("flops") is not None else 6 * n * d
            points.append(Point(n, d, loss, flops))
    if not points:
        raise TinyLMError(f"{file}: no points")
    return points


def isoflop_curves(points: list[Point]) -> list[list[Point]]:
    """The points grouped by FLOPs (within 5%), each group sorted by size, groups by budget."""
    curves: list[list[Point]] = []
    for point in sorted(points, key=lambda p: p.flops):
        if curves and point.flops <= curves[-1][0].flops * (1 + CURVE_TOLERANCE):
            curves[-1].append(point)
        else:
            curves.append([point])
    return [sorted(curve, key=lambda p: p.params) for curve in curves]


def curve_flops(curve: list[Point]) -> float:
    """An IsoFLOP curve's budget: its points' FLOPs (equal within 5%), their median."""
    return statistics.median(p.flops for p in curve)


def six_nd(curve: list[Point]) -> float:
    """A curve's budget as 6ND (what the law's closed form speaks of), converted by its own points' share of 6ND
    in their FLOPs (the rest is attention)."""
    return curve_flops(curve) * statistics.fmean(6 * p.params * p.tokens / p.flops for p in curve)
