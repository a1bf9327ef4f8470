"""RL curves as a PNG: what the loss plot cannot show (an RL loss hovers near 0 while the model learns).

Four panels against wall-clock seconds, one line per run: held-out exact-match (greedy), the
samples' reward, the k3 KL to the reference, and the informative-group fraction. Wall-clock time
rather than steps, because the goal of an RL run is stated in minutes. A panel no run has data for
is left out, so SFT runs with held-out exact-match (`--eval-every`) get the one panel they fill.
"""

from __future__ import annotations

from pathlib import Path

from tinylm.errors import TinyLMError
from tinylm.metrics import read_metrics
from tinylm.train.plot import save_figure

RL_PLOT = "rl.png"
PANELS = (("exact_match", "held-out exact-match"), ("reward", "sample reward"), ("kl", "KL to the reference"),
          ("informative_frac", "informative groups"))


def _series(rows: list[dict], key: str) -> tuple[list[float], list[float]]:
    """(elapsed seconds, value) of the rows that have `key`; an evaluation row takes the time of its step."""
    seconds_at = {r["step"]: r["elapsed_s"] for r in rows if "elapsed_s" in r}
    points = [(seconds_at.get(r["step"], 0.0), float(r[key])) for r in rows if isinstance(r.get(key), (int, float))]
    return [p[0] for p in points], [p[1] for p in points]


def plot_rl_runs(run_dirs: list[str | Path], out: str | Path | None = None) -> Path:
    """Draw the four RL panels for `run_dirs` into `out` (default: the first run's rl.png)."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    if not run_dirs:
        raise TinyLMError("plot needs at least one run folder")
    out_path = Path(out) if out else Path(run_dirs[0]) / RL_PLOT
    series = [{key: _series(read_metrics(run_dir), key) for key, _ in PANELS} for run_dir in run_dirs]
    panels = [(key, title) for key, title in PANELS if any(s[key][0] for s in series)] or list(PANELS[:1])
    columns = 1 if len(panels) == 1 else 2
    rows_of_panels = (len(panels) + 1) // 2
    fig, axes = plt.subplots(rows_of_panels, columns, figsize=(5 * columns, 3.5 * rows_of_panels), squeeze=False)
    for ax in axes.flat[len(panels):]:
        ax.remove()
    for i, (run_dir, run_series) in enumerate(zip(run_dirs, series)):
        for ax, (key, title) in zip(axes.flat, panels):
            x, y = run_series[key]
            if x:
                ax.plot(x, y, color=f"C{i % 10}", marker="o" if key == "exact_match" else None,
                        label=Path(run_dir).resolve().name)
            ax.set_title(title)
            ax.set_xlabel("seconds")
            ax.grid(alpha=0.3)
    axes.flat[0].legend(fontsize=8)
    fig.tight_layout()
    save_figure(fig, out_path, dpi=100)
    return out_path
