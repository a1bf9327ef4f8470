"""The loss curve as a PNG, drawn from metrics.jsonl with matplotlib's file-only (Agg) backend.

Training loss is noisy from batch to batch, so it is drawn faintly with an exponential moving average
on top; dev loss points are the honest measure and are drawn as markers. Several runs can share one
figure, which is how architectures or optimizers are compared.
"""

from __future__ import annotations

import math
from pathlib import Path

from tinylm.errors import TinyLMError
from tinylm.train.metrics import read_metrics

PLOT = "loss.png"


def ema(values: list[float], beta: float = 0.9) -> list[float]:
    """Bias-corrected exponential moving average (the first points are not dragged toward zero)."""
    out, avg = [], 0.0
    for i, v in enumerate(values, start=1):
        avg = beta * avg + (1 - beta) * v
        out.append(avg / (1 - beta**i))
    return out


def plot_runs(run_dirs: list[str | Path], out: str | Path | None = None, title: str | None = None) -> Path:
    """Draw train (smoothed) and dev loss of one or more runs; returns the PNG path (written atomically)."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    if not run_dirs:
        raise TinyLMError("plot needs at least one run folder")
    out_path = Path(out) if out else Path(run_dirs[0]) / PLOT
    fig, ax = plt.subplots(figsize=(8, 5))
    drew = False
    for i, run_dir in enumerate(run_dirs):
        rows = read_metrics(run_dir)
        train = [(r["step"], r["loss"]) for r in rows
                 if isinstance(r.get("loss"), (int, float)) and math.isfinite(r["loss"])]
        dev = [(r["step"], r["dev_loss"]) for r in rows if isinstance(r.get("dev_loss"), (int, float))]
        color = f"C{i % 10}"
        label = Path(run_dir).resolve().name
        if train:
            steps, losses = zip(*train)
            ax.plot(steps, losses, color=color, alpha=0.25, linewidth=0.8)
            ax.plot(steps, ema(list(losses)), color=color, linewidth=1.6, label=f"{label} train")
            drew = True
        if dev:
            steps, losses = zip(*dev)
            ax.plot(steps, losses, color=color, marker="o", linestyle="--", label=f"{label} dev")
            drew = True
    if not drew:
        plt.close(fig)
        raise TinyLMError(f"nothing to plot: no loss rows in {', '.join(str(r) for r in run_dirs)}")
    ax.set_xlabel("step")
    ax.set_ylabel("loss (nats / token)")
    ax.set_title(title or ("loss" if len(run_dirs) > 1 else Path(run_dirs[0]).resolve().name))
    ax.grid(alpha=0.3)
    ax.legend()
    fig.tight_layout()
    out_path.parent.mkdir(parents=True, exist_ok=True)
    tmp = out_path.with_name(out_path.name + ".tmp")
    fig.savefig(tmp, format="png", dpi=110)
    plt.close(fig)
    tmp.replace(out_path)
    return out_path
