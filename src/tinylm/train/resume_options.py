"""A resumed run is the same run: its model, data and options come from the run, not from today's defaults.

`tinylm train --out runs/small --resume latest --max-steps 10000` must continue the `small` run
with its own preset, `--set` values, data folder, batch and optimizer, changing only what the
command line (or `--config` file) says. So the options of the checkpoint being resumed (saved in
its config.json under "train") fill in every option the user did not give; the options that belong
to this invocation alone (where to run, how to show progress) are never taken from the run.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from tinylm.checkpoint import read_checkpoint_config
from tinylm.runtime.distributed import launched_by_torchrun

# options that describe this invocation, not the run: never inherited
PER_INVOCATION: frozenset[str] = frozenset({"resume", "out", "device", "threads", "progress", "tensorboard", "wandb",
                                              "dist_timeout", "rollout_url", "rollout_timeout"})


# options a run folder may predate, with the value its run had before they existed (not today's default)
BEFORE_THEY_EXISTED: dict[str, Any] = {"seq_len_warmup_steps": 0}


def options_for_resume(values: dict[str, Any], explicit: set[str],
                       checkpoint: Path) -> tuple[dict[str, Any], list[str]]:
    """(`values` with every option not in `explicit` taken from the checkpoint's run, the names taken)."""
    saved = read_checkpoint_config(checkpoint).get("train")
    if not isinstance(saved, dict):
        return dict(values), []  # a weights-only checkpoint (e.g. `tinylm import`) has no run options
    saved = {**BEFORE_THEY_EXISTED, **saved}
    merged = dict(values)
    taken = []
    alone = not launched_by_torchrun()
    for name, value in saved.items():
        if name == "fsdp" and alone:  # sharding needs several processes; the checkpoint holds the model whole
            continue
        if name in values and name not in explicit and name not in PER_INVOCATION and values[name] != value:
            merged[name] = value
            taken.append(name)
    return merged, taken


def describe_taken(merged: dict[str, Any], taken: list[str]) -> str:
    """One line for the console: which options the run supplied."""
    shown = ", ".join(f"{name}={merged[name]!r}" for name in sorted(taken))
    return f"resuming with the run's own options: {shown}" if taken else ""
