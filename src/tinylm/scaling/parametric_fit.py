"""Chinchilla's Approach 3: one law for every point, L(N, D) = E + A / N^alpha + B / D^beta.

Fitted as Hoffmann et al. (2022) do and Besiroglu et al. (2024) redid: with a = ln A, b = ln B, e = ln E,

    minimise  sum_i Huber_delta( LSE(a - alpha ln N_i, b - beta ln D_i, e) - ln L_i ),   delta = 1e-3

by L-BFGS from the best starts of a grid (the objective has many local minima), keeping the best: the objective
is evaluated at all 5,400 starts of Hoffmann et al.'s grid and followed downhill from the 40 lowest. LSE is
log-sum-exp, so the model is ln L exactly and every term is a log-loss residual; the Huber loss is quadratic
within delta of zero and linear beyond, so a few odd runs do not drag the law. Besiroglu et al. found
Chinchilla's own fit stopped early and gave intervals too narrow to be real; the intervals here are a
bootstrap (points resampled with replacement, refitted from the best starts) and the fit is refused, never
printed, when the optimizer does not converge or a parameter ends at the edge of its range.

Given the law, the compute-optimal split of C = 6ND is closed-form (minimise over N with D = C / 6N):

    N_opt(C) = G (C/6)^(beta/(alpha+beta)),  D_opt(C) = (C/6)^(alpha/(alpha+beta)) / G,
    G = (alpha A / (beta B))^(1/(alpha+beta))

so the exponents Approach 2 measures should be beta/(alpha+beta) and alpha/(alpha+beta).
"""

from __future__ import annotations

import itertools
import math
from dataclasses import dataclass
from typing import Any

import numpy as np
from scipy.optimize import minimize

from tinylm.errors import TinyLMError
from tinylm.scaling.points import Point

DELTA = 1e-3
BOOTSTRAP = 200
# the start grid (Hoffmann et al.'s ranges): a, b, e, alpha, beta; L-BFGS runs from the STARTS best of them
GRID = (np.arange(0.0, 26.0, 5.0), np.arange(0.0, 26.0, 5.0), np.arange(-1.0, 1.6, 0.5),
        np.array([0.1, 0.5, 1.0, 1.5, 2.0]), np.array([0.1, 0.5, 1.0, 1.5, 2.0]))
STARTS = 40
BOUNDS = ((-20.0, 60.0), (-20.0, 60.0), (-10.0, 5.0), (1e-3, 5.0), (1e-3, 5.0))
NAMES = ("E", "A", "B", "alpha", "beta")


def huber(r: np.ndarray, delta: float = DELTA) -> tuple[np.ndarray, np.ndarray]:
    """Huber loss of each residual and its derivative."""
    size = np.abs(r)
    small = size <= delta
    return np.where(small, 0.5 * r * r, delta * (size - 0.5 * delta)), np.clip(r, -delta, delta)


def objective(theta: np.ndarray, log_n: np.ndarray, log_d: np.ndarray, log_l: np.ndarray) -> tuple[float, np.ndarray]:
    """The summed Huber loss of the log-loss residuals and its gradient in (a, b, e, alpha, beta)."""
    a, b, e, alpha, beta = theta
    t_n, t_d = a - alpha * log_n, b - beta * log_d
    top = np.maximum(np.maximum(t_n, t_d), e)  # log-sum-exp, shifted by the largest term
    w_n, w_d, w_e = np.exp(t_n - top), np.exp(t_d - top), np.exp(e - top)
    total = w_n + w_d + w_e
    loss, slope = huber(top + np.log(total) - log_l)
    scale = slope / total  # d LSE / d term is that term's softmax weight; times the Huber slope
    g_n, g_d = w_n * scale, w_d * scale
    gradient = np.array([g_n.sum(), g_d.sum(), (w_e * scale).sum(), -(g_n * log_n).sum(), -(g_d * log_d).sum()])
    return float(loss.sum()), gradient


def _minimise(start: np.ndarray, data: tuple[np.ndarray, ...], tight: bool = False) -> tuple[float, np.ndarray, bool]:
    """L-BFGS from one start; `tight`: to the last digits (the grid's best start is polished so, the others need
    only show which basin they reach)."""
    options = {"maxiter": 5000, "ftol": 1e-15, "gtol": 1e-12} if tight else {"maxiter": 200}
    result = minimize(objective, start, args=data, jac=True, method="L-BFGS-B", bounds=BOUNDS, options=options)
    return float(result.fun), result.x, bool(result.success)


@dataclass(frozen=True)
class Law:
    E: float
    A: float
    B: float
    alpha: float
    beta: float

    @classmethod
    def from_theta(cls, theta: np.ndarray) -> Law:
        a, b, e, alpha, beta = (float(v) for v in theta)
        return cls(math.exp(e), math.exp(a), math.exp(b), alpha, beta)

    @classmethod
    def of(cls, result: dict[str, Any]) -> Law:
        """The law in a fit's JSON (`E`, `A`, `B`, `alpha`, `beta`)."""
        return cls(*(float(result[name]) for name in NAMES))

    def loss(self, params: float, tokens: float) -> float:
        return self.E + self.A / params ** self.alpha + self.B / tokens ** self.beta

    def optimal(self, flops: float) -> tuple[float, float]:
        """(N_opt, D_opt) of the law for C = 6ND (closed form, see the module's docstring)."""
        g = (self.alpha * self.A / (self.beta * self.B)) ** (1 / (self.alpha + self.beta))
        share = flops / 6
        return g * share ** (self.beta / (self.alpha + self.beta)), share ** (self.alpha / (self.alpha + self.beta)) / g

    @property
    def exponents(self) -> tuple[float, float]:
        """(a, b) of N_opt ~ C^a, D_opt ~ C^b."""
        total = self.alpha + self.beta
        return self.beta / total, self.alpha / total

    def values(self) -> tuple[float, ...]:
        return (self.E, self.A, self.B, self.alpha, self.beta)


@dataclass(frozen=True)
class ParametricFit:
    law: Law
    intervals: dict[str, tuple[float, float]]  # 95% bootstrap intervals of E, A, B, alpha, beta
    draws: tuple[Law, ...]  # the bootstrap's laws (for intervals of anything derived from them)
    rms_residual: float  # of ln L

    def interval_of(self, value: callable) -> tuple[float, float]:  # type: ignore[valid-type]
        """The 95% bootstrap interval of any function of the law."""
        values = [value(law) for law in self.draws]
        low, high = np.percentile(values, [2.5, 97.5])
        return float(low), float(high)

    def to_dict(self) -> dict[str, object]:
        out: dict[str, object] = dict(zip(NAMES, self.law.values()))
        out.update({f"{name}_interval": list(self.intervals[name]) for name in NAMES})
        a, b = self.law.exponents
        out.update({"law_a": a, "law_b": b, "rms_log_residual": self.rms_residual})
        return out


def _data(points: list[Point]) -> tuple[np.ndarray, ...]:
    return (np.log([p.params for p in points]), np.log([p.tokens for p in points]), np.log([p.loss for p in points]))


def _at_bound(theta: np.ndarray) -> str | None:
    for name, value, (low, high) in zip(("ln A", "ln B", "ln E", "alpha", "beta"), theta, BOUNDS):
        if min(value - low, high - value) < 1e-6 * max(1.0, abs(value)):
            return name
    return None


def fit_parametric(points: list[Point], bootstrap: int = BOOTSTRAP, seed: int = 0) -> ParametricFit:
    """The best law over the start grid, with bootstrap intervals; refused when it cannot be trusted."""
    if len(points) < 6:
        raise TinyLMError(f"Approach 3 fits 5 parameters: it needs at least 6 points (got {len(points)})")
    if len({p.params for p in points}) < 2 or len({p.tokens for p in points}) < 2:
        raise TinyLMError("Approach 3 needs points at two or more sizes and two or more token counts: one size "
                          "alone cannot separate A/N^alpha from E")
    data = _data(points)
    grid = np.array(list(itertools.product(*GRID)))
    first = np.array([objective(start, *data)[0] for start in grid])
    starts = grid[np.argsort(first, kind="stable")[:STARTS]]  # the grid's lowest points, each followed downhill
    runs = sorted((_minimise(start, data) for start in starts), key=lambda run: run[0])
    # the three best basins, each polished to convergence: the best of them is the fit
    value, theta, success = min((_minimise(run[1], data, tight=True) for run in runs[:3]), key=lambda run: run[0])
    if not success:
        raise TinyLMError("Approach 3 did not converge: L-BFGS stopped before a minimum from every start of the grid; "
                          "no law is printed")
    edge = _at_bound(theta)
    if edge is not None:
        raise TinyLMError(f"Approach 3 did not converge: its best fit puts {edge} at the edge of its range "
                          f"({theta.round(4).tolist()}), so the points do not determine the law; no law is printed")
    rng = np.random.default_rng(seed)
    draws = []
    for _ in range(bootstrap):
        index = rng.integers(0, len(points), len(points))
        sample = tuple(column[index] for column in data)
        draws.append(Law.from_theta(_minimise(theta, sample, tight=True)[1]))  # its optimum lies near the fit
    values = np.array([law.values() for law in draws])
    low, high = np.percentile(values, [2.5, 97.5], axis=0)
    law = Law.from_theta(theta)
    predicted = np.log([law.loss(p.params, p.tokens) for p in points])
    rms = float(np.sqrt(np.mean((predicted - data[2]) ** 2)))
    intervals = {name: (float(lo), float(hi)) for name, lo, hi in zip(NAMES, low, high)}
    return ParametricFit(law, intervals, tuple(draws), rms)
