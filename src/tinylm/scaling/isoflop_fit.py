"""Chinchilla's Approach 2: for each compute budget, a parabola in log N; its minimum is that budget's best size.

Hoffmann et al. (2022) trained several sizes at each of several FLOP budgets (an IsoFLOP curve), fitted

    L(x) = a x^2 + b x + c,   x = ln N,   N*(C) = exp(-b / 2a)

on each curve, and then power laws across budgets, N*(C) = k_N C^a and D*(C) = k_D C^b, as straight lines in
log-log. On one curve D is a function of N (the budget fixes the product), so D* is read off the curve's own
line ln D = u ln N + v at N*: with the attention term C is not exactly 6ND, and this needs no assumption.

A curve says nothing about its budget's optimum when the parabola opens downward or its minimum lies outside
the sizes tried (an extrapolation); such a curve is reported and left out of the power laws. Intervals come
from the bootstrap: each curve's points resampled with replacement, everything refitted.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

from tinylm.errors import TinyLMError
from tinylm.scaling.points import Point, curve_flops

BOOTSTRAP = 200


@dataclass(frozen=True)
class CurveFit:
    """One IsoFLOP curve and its parabola."""

    flops: float
    points: tuple[Point, ...]
    coefficients: tuple[float, float, float]  # a, b, c of a x^2 + b x + c, x = ln N
    best_params: float | None  # N*, None when the parabola gives no interior minimum
    best_tokens: float | None
    problem: str = ""  # why the curve gives no N*

    @property
    def measured_interior(self) -> bool:
        """Whether the lowest measured loss is at neither end of the sizes tried."""
        losses = [p.loss for p in self.points]
        return 0 < losses.index(min(losses)) < len(losses) - 1

    def to_dict(self) -> dict[str, object]:
        return {"flops": self.flops, "sizes": [p.params for p in self.points],
                "losses": [p.loss for p in self.points], "parabola": list(self.coefficients),
                "best_params": self.best_params, "best_tokens": self.best_tokens,
                "tokens_per_param": (self.best_tokens / self.best_params if self.best_params and self.best_tokens
                                     else None),
                "measured_interior": self.measured_interior, "problem": self.problem or None}


def fit_curve(points: list[Point]) -> CurveFit:
    """The parabola of one IsoFLOP curve (at least three sizes) and its minimum."""
    flops = curve_flops(points)
    x = np.log([p.params for p in points])
    coefficients = tuple(float(c) for c in np.polyfit(x, [p.loss for p in points], 2))
    a, b, _ = coefficients
    tokens_line = np.polyfit(x, np.log([p.tokens for p in points]), 1)
    problem = ""
    if a <= 0:
        problem = "the parabola opens downward: no minimum"
    else:
        vertex = -b / (2 * a)
        if not x.min() <= vertex <= x.max():
            side = "smallest" if vertex < x.min() else "largest"
            problem = f"the minimum lies beyond the {side} size tried (N* = {math.exp(vertex):.3g}): an extrapolation"
    if problem:
        return CurveFit(flops, tuple(points), coefficients, None, None, problem)
    vertex = -b / (2 * a)
    return CurveFit(flops, tuple(points), coefficients, math.exp(vertex),
                    math.exp(float(np.polyval(tokens_line, vertex))))


def _power_law(flops: list[float], values: list[float]) -> tuple[float, float]:
    """(exponent, coefficient) of values = coefficient x flops^exponent, least squares in log-log."""
    slope, intercept = np.polyfit(np.log(flops), np.log(values), 1)
    return float(slope), float(math.exp(intercept))


@dataclass(frozen=True)
class IsoFLOPFit:
    curves: tuple[CurveFit, ...]
    a: float  # N* ~ C^a
    b: float  # D* ~ C^b
    k_params: float
    k_tokens: float
    a_interval: tuple[float, float]
    b_interval: tuple[float, float]

    def best_params(self, flops: float) -> float:
        return self.k_params * flops ** self.a

    def best_tokens(self, flops: float) -> float:
        return self.k_tokens * flops ** self.b

    def to_dict(self) -> dict[str, object]:
        return {"a": self.a, "b": self.b, "a_interval": list(self.a_interval), "b_interval": list(self.b_interval),
                "k_params": self.k_params, "k_tokens": self.k_tokens,
                "curves": [curve.to_dict() for curve in self.curves]}


def _laws(curves: list[CurveFit]) -> tuple[float, float, float, float] | None:
    usable = [c for c in curves if c.best_params is not None]
    if len(usable) < 2:
        return None
    a, k_n = _power_law([c.flops for c in usable], [c.best_params for c in usable])  # type: ignore[misc]
    b, k_d = _power_law([c.flops for c in usable], [c.best_tokens for c in usable])  # type: ignore[misc]
    return a, b, k_n, k_d


def fit_isoflop(curves: list[list[Point]], bootstrap: int = BOOTSTRAP, seed: int = 0) -> IsoFLOPFit:
    """Approach 2 over IsoFLOP curves of three or more sizes each; at least two must give an interior N*."""
    usable = [curve for curve in curves if len({p.params for p in curve}) >= 3]
    if len(usable) < 2:
        raise TinyLMError(f"Approach 2 needs IsoFLOP curves: at least two budgets with three or more sizes each "
                          f"(got {len(usable)} of {len(curves)} budgets); points of one budget share their flops "
                          "within 5%")
    fits = [fit_curve(curve) for curve in usable]
    laws = _laws(fits)
    if laws is None:
        problems = "; ".join(f"{c.flops:.3g} FLOPs: {c.problem}" for c in fits if c.problem)
        raise TinyLMError(f"Approach 2 found a minimum inside the sizes tried at fewer than two budgets ({problems})")
    rng = np.random.default_rng(seed)
    draws = []
    for _ in range(bootstrap):
        resampled = []
        for curve in usable:
            picked = [curve[i] for i in rng.integers(0, len(curve), len(curve))]
            if len({p.params for p in picked}) >= 3:
                resampled.append(fit_curve(picked))
        redone = _laws(resampled)
        if redone is not None:
            draws.append(redone[:2])
    a, b, k_n, k_d = laws
    if len(draws) < bootstrap // 2:
        raise TinyLMError(f"Approach 2's bootstrap found an interior minimum at two budgets in only {len(draws)} of "
                          f"{bootstrap} resamples: its exponents are not to be trusted (add sizes around each minimum)")
    spread = np.percentile(np.array(draws), [2.5, 97.5], axis=0)
    return IsoFLOPFit(tuple(fits), a, b, k_n, k_d, (float(spread[0, 0]), float(spread[1, 0])),
                      (float(spread[0, 1]), float(spread[1, 1])))
