"""The speedrun's table (speedrun.md) and its figure (speedrun.png), drawn from speedrun.json's content."""

from __future__ import annotations

import math
import statistics
from pathlib import Path
from typing import Any

from tinylm.bench.result_files import save_figure


def _stat(stat: dict[str, float | None], fmt: str) -> str:
    if stat["mean"] is None:
        return "-"
    return f"{stat['mean']:{fmt}} ± {stat['std']:{fmt}}"


def _percent(stat: dict[str, float | None]) -> str:
    return "-" if stat["mean"] is None else f"{100 * stat['mean']:.1f}%"


def _ratios(row: dict[str, Any]) -> str:
    return ", ".join("never" if r is None else f"{r:.2f}" for r in row["ratios"])


def format_markdown(result: dict[str, Any]) -> str:
    budget = result["budget"]
    choices = ", ".join(f"{k} {v}" for k, v in result["choices"].items()) or "as each run chose"
    lines = [
        f"# tinylm speedrun: {result['preset']} preset, reference `{result['reference']}`",
        "",
        f"Every run: {budget['tokens']:,} training tokens (the reference's {budget['reference_steps']:,} steps), "
        f"seeds {', '.join(map(str, result['seeds']))}, {choices}. Target: {result['target']}. "
        "Time counts the training steps only (not the evaluations). The ratio is recipe over reference within a "
        "seed, then the median over seeds; ± is the standard deviation over seeds."
        + (" Every run stopped at its first evaluation at or below the target (--stop-at-target): its final dev bpb "
           "is where it stopped." if result.get("stopped_at_target") else "")
        + (f" Warmups: {result['warmups_shortened']}." if result.get("warmups_shortened") else ""),
        "",
        "| recipe | time to target (s) | ratio (median) | ratio per seed | steps to target | final dev bpb | "
        "tokens/s | MFU | what it is |",
        "|---|---:|---:|---|---:|---:|---:|---:|---|",
    ]
    for row in result["rows"]:
        median = row["time_to_target_ratio"]
        cells = [f"`{row['spec']}`" + (" (reference)" if row["recipe"].startswith("reference") else ""),
                 _stat(row["train_s_to_target"], ".1f"),
                 "never" if median is None else f"{median:.2f}", _ratios(row), _stat(row["step_to_target"], ".0f"),
                 _stat(row["final_dev_bpb"], ".4f"), _stat(row["tokens_per_s"], ",.0f"), _percent(row["mfu"]),
                 row["description"]]
        lines.append("| " + " | ".join(cells) + " |")
    lines += ["", "![dev bpb against training seconds](speedrun.png)", ""]
    return "\n".join(lines)


def y_range(result: dict[str, Any]) -> tuple[float, float] | None:
    """The plot's dev bpb range: every target, and every curve from its second evaluation on (the first, far above
    the rest early in training, would flatten what happens near the target; its line still enters the frame)."""
    values = [r["target_bpb"] for r in result["runs"] if r.get("target_bpb") is not None]
    for run in result["runs"]:
        values += [p["dev_bpb"] for p in run["curve"][1:] or run["curve"]]
    values = [v for v in values if math.isfinite(v)]
    if not values:
        return None
    low, high = min(values), max(values)
    margin = 0.05 * (high - low) or 0.05 * max(abs(high), 1.0)
    return low - margin, high + margin


def plot_curves(result: dict[str, Any], path: Path) -> Path:
    """Dev bpb against training seconds: one color per recipe, one line per seed, the target dashed."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(8, 5))
    for i, row in enumerate(result["rows"]):
        first = True
        for run in (r for r in result["runs"] if r["recipe"] == row["recipe"]):
            curve = run["curve"]
            if not curve:
                continue
            ax.plot([p["train_s"] for p in curve], [p["dev_bpb"] for p in curve], color=f"C{i % 10}",
                    linewidth=1.2, alpha=0.85, label=row["spec"] if first else None)
            first = False
    targets = [r["target_bpb"] for r in result["runs"] if r.get("target_bpb") is not None]
    if targets:
        ax.axhline(statistics.median(targets), color="0.3", linestyle="--", linewidth=1, label="target (median)")
    if shown := y_range(result):
        ax.set_ylim(*shown)
    ax.set_xlabel("seconds of training (steps only)")
    ax.set_ylabel("dev bits per byte")
    ax.legend(fontsize=8)
    ax.set_title(f"tinylm speedrun: {result['preset']}, reference {result['reference']}")
    fig.tight_layout()
    return save_figure(fig, path)
