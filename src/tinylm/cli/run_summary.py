"""The closing lines every post-training command prints: `done:` with each score before -> after, then files.

The "before" is the step-0 evaluation the run logged (the starting model's scores), so a user sees what
the stage changed without opening the metrics log.
"""

from __future__ import annotations

import sys
from typing import Any

from tinylm.metrics import read_metrics

Shown = tuple[tuple[str, str, str], ...]  # (metric key, label, format)


def first_evaluation(run_dir: str) -> dict[str, float]:
    """The step-0 evaluation the run logged (the starting model's scores)."""
    for row in read_metrics(run_dir):
        if row.get("step") == 0:
            return {k: v for k, v in row.items() if isinstance(v, float)}
    return {}


def steps_and_loss(summary: Any) -> list[str]:
    """The opening parts of every `done:` line: the step reached and the last train loss."""
    parts = [f"step {summary.steps}"]
    if summary.final_loss is not None:
        parts.append(f"train loss {summary.final_loss:.4f}")
    return parts


def before_after(summary: Any, shown: Shown) -> list[str]:
    """'label before -> after' for each shown metric the run's last evaluation has."""
    before, after = first_evaluation(summary.run_dir), summary.evaluation
    parts = []
    for key, label, fmt in shown:
        if key in after:
            was = f"{fmt.format(before[key])} -> " if key in before else ""
            parts.append(f"{label} {was}{fmt.format(after[key])}")
    return parts


def print_outcome(summary: Any, parts: list[str], files: list[str]) -> None:
    """`done: parts`, then (with a checkpoint) the checkpoint and `files` lines, then the held-out samples."""
    print("done: " + ", ".join(parts))
    if summary.checkpoint:
        print(f"checkpoint: {summary.checkpoint}")
        for line in files:
            print(line)
    if summary.sample:
        print("held-out samples:\n" + summary.sample)
    sys.stdout.flush()
