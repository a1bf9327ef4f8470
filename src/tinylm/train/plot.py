"""The loss curve as a PNG, drawn from metrics.jsonl with matplotlib's file-only (Agg) backend.

Training loss is noisy from batch to batch, so it is drawn faintly with a centered moving average on
top (no lag, so it lies on the points even on a short run whose loss falls fast); dev loss points
are the honest measure and are drawn as markers. Several runs can share one figure, which is how
architectures or optimizers are compared.
"""

from __future__ import annotations

import contextlib
import itertools
import math
from pathlib import Path
from typing import Any

from tinylm.errors import TinyLMError
from tinylm.metrics import read_metrics

PLOT = "loss.png"


def smooth(values: list[float], half_width: int | None = None) -> list[float]:
    """Centered moving average: each point is the mean of itself and `half_width` neighbours on each side.

    A trailing average (an EMA) lags a falling loss and so draws the whole curve above the points of a
    short run. A centered window has no lag: a straight line passes through unchanged, and every
    smoothed point is a mean of raw ones, so the curve stays inside the raw range. Near the ends the
    window shrinks to what fits on both sides (the first and last points are their own average).
    The default width grows with the run: none below 20 points, at most 25 a side.
    """
    n = len(values)
    half = min(25, n // 20) if half_width is None else half_width
    sums = [0.0, *itertools.accumulate(values)]
    out = []
    for i in range(n):
        reach = min(half, i, n - 1 - i)
        out.append((sums[i + reach + 1] - sums[i - reach]) / (2 * reach + 1))
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
            ax.plot(steps, smooth(list(losses)), color=color, linewidth=1.6, label=f"{label} train")
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
    save_figure(fig, out_path, dpi=110)
    return out_path


def save_figure(fig: Any, out_path: Path, dpi: int) -> None:
    """Write `fig` as a PNG atomically (a .tmp then a rename), creating the folder; always closes it."""
    import matplotlib.pyplot as plt

    tmp = out_path.with_name(out_path.name + ".tmp")
    try:
        out_path.parent.mkdir(parents=True, exist_ok=True)
        fig.savefig(tmp, format="png", dpi=dpi)
        tmp.replace(out_path)
    except OSError as exc:
        with contextlib.suppress(OSError):  # nothing half-written stays behind
            tmp.unlink()
        raise TinyLMError(f"cannot write the plot {out_path}: {exc.strerror or exc}") from None
    finally:
        plt.close(fig)
