"""The sweep's three pictures, as PNGs beside its points: the IsoFLOP curves with their parabolas, the
compute-optimal frontier with both approaches' power laws, and the fitted law against every point."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np

from tinylm.scaling.parametric_fit import Law
from tinylm.scaling.points import Point, isoflop_curves
from tinylm.train.plot import save_figure

PLOTS = ("isoflop.png", "frontier.png", "law.png")


def _pyplot() -> Any:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    return plt


def plot_isoflop(points: list[Point], result: dict[str, Any], out: Path) -> Path:
    plt = _pyplot()
    fig, ax = plt.subplots(figsize=(7, 4.5))
    fits = {round(c["flops"]): c for c in (result.get("approach2") or {}).get("curves", [])}
    for i, curve in enumerate(isoflop_curves(points)):
        color = f"C{i % 10}"
        flops = float(np.median([p.flops for p in curve]))
        ax.plot([p.params for p in curve], [p.loss for p in curve], "o", color=color, label=f"{flops:.3g} FLOPs")
        fit = fits.get(round(flops))
        if fit is not None:
            x = np.linspace(np.log(min(fit["sizes"])), np.log(max(fit["sizes"])), 100)
            ax.plot(np.exp(x), np.polyval(fit["parabola"], x), "-", color=color, alpha=0.7)
            if fit["best_params"]:
                ax.axvline(fit["best_params"], color=color, linestyle=":", alpha=0.6)
    ax.set_xscale("log")
    ax.set_xlabel("parameters N (matrices, tied head included)")
    ax.set_ylabel("final dev loss (nats / token)")
    ax.set_title("IsoFLOP curves: a parabola in log N per budget (Approach 2)")
    ax.grid(alpha=0.3, which="both")
    ax.legend()
    fig.tight_layout()
    save_figure(fig, out / PLOTS[0], dpi=110)
    return out / PLOTS[0]


def plot_frontier(result: dict[str, Any], out: Path) -> Path:
    plt = _pyplot()
    law = Law(result["E"], result["A"], result["B"], result["alpha"], result["beta"])
    budgets = [b["six_nd"] for b in result["budgets"]]
    c = np.geomspace(min(budgets) / 3, max(budgets) * 10, 50)
    fig, ax = plt.subplots(figsize=(7, 4.5))
    ax.plot(c, [law.optimal(v)[0] for v in c], "-", color="C0", label=f"Approach 3: N_opt ~ C^{result['law_a']:.2f}")
    ax.plot(c, [law.optimal(v)[1] for v in c], "-", color="C1", label=f"Approach 3: D_opt ~ C^{result['law_b']:.2f}")
    approach2 = result.get("approach2")
    if approach2:
        found = [b for b in result["budgets"] if b.get("approach2_params")]
        ax.plot([b["six_nd"] for b in found], [b["approach2_params"] for b in found], "o", color="C0",
                label=f"Approach 2: N* (N ~ C^{approach2['a']:.2f})")
        ax.plot([b["six_nd"] for b in found], [b["approach2_params"] * b["approach2_tokens_per_param"] for b in found],
                "s", color="C1", label=f"Approach 2: D* (D ~ C^{approach2['b']:.2f})")
    ax.set_xscale("log")
    ax.set_yscale("log")
    ax.set_xlabel("compute C = 6ND (FLOPs)")
    ax.set_ylabel("compute-optimal N (parameters) and D (tokens)")
    ax.set_title("the compute-optimal frontier")
    ax.grid(alpha=0.3, which="both")
    ax.legend()
    fig.tight_layout()
    save_figure(fig, out / PLOTS[1], dpi=110)
    return out / PLOTS[1]


def plot_law(points: list[Point], result: dict[str, Any], out: Path) -> Path:
    plt = _pyplot()
    law = Law(result["E"], result["A"], result["B"], result["alpha"], result["beta"])
    fig, ax = plt.subplots(figsize=(7, 4.5))
    for i, curve in enumerate(isoflop_curves(points)):
        color = f"C{i % 10}"
        ax.plot([p.params for p in curve], [p.loss for p in curve], "o", color=color)
        n = np.geomspace(curve[0].params, curve[-1].params, 60)
        flops = float(np.median([p.flops for p in curve]))
        share = float(np.mean([6 * p.params * p.tokens / p.flops for p in curve]))
        ax.plot(n, [law.loss(v, flops * share / (6 * v)) for v in n], "-", color=color, alpha=0.7,
                label=f"law at {flops:.3g} FLOPs")
    ax.set_xscale("log")
    ax.set_xlabel("parameters N")
    ax.set_ylabel("final dev loss (nats / token)")
    ax.set_title(f"L = {law.E:.2f} + {law.A:.3g}/N^{law.alpha:.2f} + {law.B:.3g}/D^{law.beta:.2f} (Approach 3)")
    ax.grid(alpha=0.3, which="both")
    ax.legend()
    fig.tight_layout()
    save_figure(fig, out / PLOTS[2], dpi=110)
    return out / PLOTS[2]


def plot_all(points: list[Point], result: dict[str, Any], out: Path) -> list[Path]:
    return [plot_isoflop(points, result, out), plot_frontier(result, out), plot_law(points, result, out)]
