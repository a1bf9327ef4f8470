"""The sweep's three pictures, as PNGs beside its points: the IsoFLOP curves with their parabolas, the
compute-optimal frontier with both approaches' power laws, and the fitted law against every point."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np

from tinylm.bench.result_files import save_figure
from tinylm.scaling.parametric_fit import Law
from tinylm.scaling.points import Point, curve_flops, isoflop_curves, six_nd

PLOTS = ("isoflop.png", "frontier.png", "law.png")
Drawing = Callable[[Path], Path]


def _pyplot() -> Any:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    return plt


def _axes(title: str, xlabel: str, ylabel: str, log_y: bool = False) -> tuple[Any, Any]:
    """A figure with the look every plot here shares: log N or log C across, a light grid."""
    fig, ax = _pyplot().subplots(figsize=(7, 4.5))
    ax.set_xscale("log")
    if log_y:
        ax.set_yscale("log")
    ax.set(title=title, xlabel=xlabel, ylabel=ylabel)
    ax.grid(alpha=0.3, which="both")
    return fig, ax


def _saved(fig: Any, ax: Any, path: Path) -> Path:
    ax.legend()
    fig.tight_layout()
    return save_figure(fig, path)


def plot_isoflop(points: list[Point], result: dict[str, Any], path: Path) -> Path:
    fig, ax = _axes("IsoFLOP curves: a parabola in log N per budget (Approach 2)",
                    "parameters N (matrices, tied head included)", "final dev loss (nats / token)")
    fits = {round(c["flops"]): c for c in (result.get("approach2") or {}).get("curves", [])}
    for i, curve in enumerate(isoflop_curves(points)):
        color = f"C{i % 10}"
        flops = curve_flops(curve)
        ax.plot([p.params for p in curve], [p.loss for p in curve], "o", color=color, label=f"{flops:.3g} FLOPs")
        fit = fits.get(round(flops))
        if fit is not None:
            x = np.linspace(np.log(min(fit["sizes"])), np.log(max(fit["sizes"])), 100)
            ax.plot(np.exp(x), np.polyval(fit["parabola"], x), "-", color=color, alpha=0.7)
            if fit["best_params"]:
                ax.axvline(fit["best_params"], color=color, linestyle=":", alpha=0.6)
    return _saved(fig, ax, path)


def plot_frontier(result: dict[str, Any], path: Path) -> Path:
    law = Law.of(result)
    budgets = [b["six_nd"] for b in result["budgets"]]
    c = np.geomspace(min(budgets) / 3, max(budgets) * 10, 50)
    fig, ax = _axes("the compute-optimal frontier", "compute C = 6ND (FLOPs)",
                    "compute-optimal N (parameters) and D (tokens)", log_y=True)
    ax.plot(c, [law.optimal(v)[0] for v in c], "-", color="C0", label=f"Approach 3: N_opt ~ C^{result['law_a']:.2f}")
    ax.plot(c, [law.optimal(v)[1] for v in c], "-", color="C1", label=f"Approach 3: D_opt ~ C^{result['law_b']:.2f}")
    approach2 = result.get("approach2")
    if approach2:
        found = [b for b in result["budgets"] if b.get("approach2_params")]
        ax.plot([b["six_nd"] for b in found], [b["approach2_params"] for b in found], "o", color="C0",
                label=f"Approach 2: N* (N ~ C^{approach2['a']:.2f})")
        ax.plot([b["six_nd"] for b in found], [b["approach2_params"] * b["approach2_tokens_per_param"] for b in found],
                "s", color="C1", label=f"Approach 2: D* (D ~ C^{approach2['b']:.2f})")
    return _saved(fig, ax, path)


def plot_law(points: list[Point], result: dict[str, Any], path: Path) -> Path:
    law = Law.of(result)
    fig, ax = _axes(f"L = {law.E:.2f} + {law.A:.3g}/N^{law.alpha:.2f} + {law.B:.3g}/D^{law.beta:.2f} (Approach 3)",
                    "parameters N", "final dev loss (nats / token)")
    for i, curve in enumerate(isoflop_curves(points)):
        color = f"C{i % 10}"
        ax.plot([p.params for p in curve], [p.loss for p in curve], "o", color=color)
        n = np.geomspace(curve[0].params, curve[-1].params, 60)
        budget = six_nd(curve)  # the law's D at this budget for each N: C = 6ND
        ax.plot(n, [law.loss(v, budget / (6 * v)) for v in n], "-", color=color, alpha=0.7,
                label=f"law at {curve_flops(curve):.3g} FLOPs")
    return _saved(fig, ax, path)


def drawings(points: list[Point], result: dict[str, Any]) -> dict[str, Drawing]:
    """Each PNG's name and what draws it at a path (bench/result_files.py writes them aside, then renames)."""
    return {PLOTS[0]: lambda path: plot_isoflop(points, result, path),
            PLOTS[1]: lambda path: plot_frontier(result, path),
            PLOTS[2]: lambda path: plot_law(points, result, path)}
