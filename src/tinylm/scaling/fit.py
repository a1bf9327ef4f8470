"""`tinylm scaling fit`: both of Hoffmann et al.'s fits on one set of points, and what they say together.

The JSON holds Approach 3's E, A, B, alpha, beta with their intervals and the exponents its law implies
(law_a, law_b), and, when the points form IsoFLOP curves, Approach 2's exponents a and b (N* ~ C^a,
D* ~ C^b) with their intervals, its curves under "approach2".

Approach 3's law gives the compute-optimal split of C = 6ND in closed form (parametric_fit.py), Approach 2
measures it per budget (isoflop_fit.py). Tokens per parameter at the optimum, D_opt / N_opt, is the number a
recipe is set by (Chinchilla's ~20, nanochat's ~10.5): it is reported at each budget of the points, with its
bootstrap interval, from both approaches, and where they disagree, by how much.

The sweep's FLOPs count attention too; the law's closed form is for C = 6ND. Each budget is converted with
the share 6ND / FLOPs of its own points (0.8-0.9 at context 256), so both approaches speak of the same runs.
"""

from __future__ import annotations

import math
from typing import Any

from tinylm.errors import TinyLMError
from tinylm.scaling.isoflop_fit import fit_isoflop
from tinylm.scaling.parametric_fit import NAMES, ParametricFit, fit_parametric
from tinylm.scaling.points import Point, curve_flops, isoflop_curves, six_nd


def fit_points(points: list[Point], bootstrap: int = 200, seed: int = 0) -> tuple[dict[str, Any], ParametricFit]:
    """Approach 3 always (refused when it cannot be trusted); Approach 2 when the points form IsoFLOP curves.
    The result as JSON-ready numbers, and Approach 3's fit (its bootstrap laws give any prediction an interval)."""
    parametric = fit_parametric(points, bootstrap=bootstrap, seed=seed)
    result: dict[str, Any] = {"points": len(points), **parametric.to_dict()}
    check_finite(result)
    curves = isoflop_curves(points)
    budgets = []
    for curve in curves:
        c6 = six_nd(curve)
        n_opt, d_opt = parametric.law.optimal(c6)
        low, high = parametric.interval_of(lambda law, c6=c6: law.optimal(c6)[1] / law.optimal(c6)[0])
        budgets.append({"flops": curve_flops(curve), "six_nd": c6, "params_opt": n_opt,
                        "tokens_opt": d_opt, "tokens_per_param": d_opt / n_opt,
                        "tokens_per_param_interval": [low, high]})
    result["budgets"] = budgets
    try:
        isoflop = fit_isoflop(curves, bootstrap=bootstrap, seed=seed)
    except TinyLMError as reason:
        result["approach2"] = None
        result["approach2_problem"] = str(reason)
        return result, parametric
    result["approach2"] = isoflop.to_dict()
    result["approach2_problem"] = None
    # Approach 2's exponents at the top, as Hoffmann et al. report a and b; the law's own are law_a, law_b
    result.update({key: result["approach2"][key] for key in ("a", "b", "a_interval", "b_interval")})
    for entry in budgets:
        match = next((c for c in isoflop.curves if abs(c.flops - entry["flops"]) <= 1e-9 * entry["flops"]), None)
        if match is not None and match.best_params:
            entry["approach2_params"] = match.best_params
            entry["approach2_tokens_per_param"] = match.best_tokens / match.best_params  # type: ignore[operator]
            entry["params_ratio_3_to_2"] = entry["params_opt"] / match.best_params
    return result, parametric


def check_finite(result: dict[str, Any]) -> None:
    """Never print a number the fit does not trust: a NaN or infinity anywhere refuses the whole result."""
    for name in NAMES:
        if not math.isfinite(result[name]):
            raise TinyLMError(f"Approach 3 did not converge: {name} is {result[name]}; no law is printed")

