"""The runs under a root folder, as the studio shows them: each one read from its own files, nothing cached.

A run folder is one a stage wrote: it holds `metrics.jsonl`, `status.json` or the `console.log` of a run the
studio launched (a pipeline's stages are run folders inside its folder). A folder with only `checkpoints/`
is a run when no run folder holds it (a `tinylm import`, a run from before status.json); inside a run it is
that run's by-product: RL's `rollout-weights/`, LoRA's `merged/`. What a record says comes from those files
alone, so a page refresh, a second tab or a restarted studio shows the same thing:

    status      status.json, with a "running" run whose lock is free shown as "died" (train/run_status.py)
    stage       status.json, else the newest checkpoint's config.json, else the stage table's first row (a run
                from before checkpoints named their stage was a pretraining run)
    step        the last step logged; best: the stage's headline evaluation at its best
    sparkline   up to 64 (step, loss) points, spread over the whole run
    parent      the run whose checkpoint this one started from (config.json's "base"), when under the root

A run is named by its path relative to the root ("pipeline/sft"); `resolve_run` turns a name back into
a folder and refuses anything that would leave the root (`..`, an absolute path, a link pointing out).
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from tinylm.checkpoint.layout import CHECKPOINTS, list_checkpoints
from tinylm.metrics import METRICS, read_metrics
from tinylm.stages import STAGES
from tinylm.train.run_status import STATUS_FILE, read_status, run_state

CONSOLE = "console.log"  # the output of a run the studio launched: a run from the moment it starts
WRITTEN_BY_A_STAGE = (METRICS, STATUS_FILE, CONSOLE)  # a run's own files; checkpoints/ alone may be a by-product
# the headline evaluation of each kind of run, and whether higher is better
HEADLINES: tuple[tuple[str, bool], ...] = (("exact_match", True), ("dev_accuracy", True), ("dev_bpb", False),
                                            ("dev_loss", False))
SPARK_POINTS = 64


class StudioError(Exception):
    """A request the studio refuses; `status` is the HTTP status it answers with."""

    def __init__(self, message: str, status: int = 400) -> None:
        super().__init__(message)
        self.status = status


def holds_run_files(folder: Path) -> bool:
    """Whether `folder` holds any of a run's files, checkpoints included (it is a run, or inside one)."""
    return any((folder / marker).exists() for marker in (*WRITTEN_BY_A_STAGE, CHECKPOINTS))


def is_run(folder: Path, inside_run: bool = False) -> bool:
    """Whether `folder` is a run folder; `inside_run`: a folder above it (under the root) holds a run's files."""
    if any((folder / marker).exists() for marker in WRITTEN_BY_A_STAGE):
        return True
    return not inside_run and (folder / CHECKPOINTS).is_dir()


def find_runs(root: Path) -> list[Path]:
    """Every run folder under `root` (itself included), sorted by name; checkpoints and hidden folders skipped."""
    found = []
    stack = [(root, False)]
    while stack:
        folder, inside_run = stack.pop()
        if is_run(folder, inside_run):
            found.append(folder)
        try:
            children = [c for c in folder.iterdir() if c.is_dir() and not c.is_symlink()]
        except OSError:
            continue
        below = inside_run or holds_run_files(folder)
        stack += [(c, below) for c in children if c.name != CHECKPOINTS and not c.name.startswith(".")]
    return sorted(found, key=lambda p: p.relative_to(root).as_posix())


def run_name(root: Path, run_dir: Path) -> str:
    name = run_dir.relative_to(root).as_posix()
    return "." if name in ("", ".") else name


def resolve_run(root: Path, name: str) -> Path:
    """The run folder `name` stands for; StudioError (404) if it is not a run under the root."""
    if not name or name.startswith("/") or "\\" in name or any(part == ".." for part in name.split("/")):
        raise StudioError(f"no run {name!r} under the runs root", 404)
    root = root.resolve()
    folder = (root / name).resolve()
    if folder != root and root not in folder.parents:
        raise StudioError(f"no run {name!r} under the runs root", 404)
    inside_run = any(holds_run_files(above) for above in folder.parents if above == root or root in above.parents)
    if not folder.is_dir() or not is_run(folder, inside_run):
        raise StudioError(f"no run {name!r} under the runs root", 404)
    return folder


def newest_checkpoint_config(checkpoints: list[Path]) -> dict[str, Any]:
    """config.json of the newest readable checkpoint of `checkpoints` (oldest first), or {} when none reads."""
    for checkpoint in reversed(checkpoints):
        try:
            data = json.loads((checkpoint / "config.json").read_text(encoding="utf-8"))
        except (OSError, UnicodeDecodeError, json.JSONDecodeError):
            continue
        if isinstance(data, dict):
            return data
    return {}


def best_evaluation(rows: list[dict[str, Any]]) -> dict[str, Any] | None:
    """{"name", "value", "step"} of the run's headline evaluation at its best, or None when it has none."""
    for name, higher in HEADLINES:
        values = [(row[name], row["step"]) for row in rows if isinstance(row.get(name), (int, float))]
        if values:
            value, step = (max if higher else min)(values, key=lambda v: v[0])
            return {"name": name, "value": value, "step": step}
    return None


def sparkline(rows: list[dict[str, Any]], points: int = SPARK_POINTS) -> list[list[float]]:
    """[[steps], [losses]]: at most `points` training-loss rows, evenly spread, the last one always in."""
    losses = [(row["step"], row["loss"]) for row in rows if isinstance(row.get("loss"), (int, float))]
    if len(losses) > points:
        stride = len(losses) / points
        losses = [losses[int(i * stride)] for i in range(points - 1)] + [losses[-1]]
    return [[s for s, _ in losses], [v for _, v in losses]]


def run_record(root: Path, run_dir: Path, details: bool = False) -> dict[str, Any]:
    """What the runs page shows of one run (with `details`, a run's page: status.json and the newest config too).

    A damaged metrics line is skipped and counted, never fatal.
    """
    notes: list[str] = []
    rows = read_metrics(run_dir, say=notes.append) if (run_dir / METRICS).is_file() else []
    found = read_status(run_dir)
    status = found or {}
    checkpoints = list_checkpoints(run_dir)
    config = newest_checkpoint_config(checkpoints)
    base = config.get("base")
    parent = None
    if isinstance(base, str):
        base_run = Path(base).parent.parent if Path(base).parent.name == CHECKPOINTS else Path(base)
        try:
            resolved = base_run.resolve()
            if resolved == root.resolve() or root.resolve() in resolved.parents:
                parent = run_name(root.resolve(), resolved)
        except OSError:
            parent = None
    steps = [row["step"] for row in rows if "loss" in row]
    elapsed = [row["elapsed_s"] for row in rows if isinstance(row.get("elapsed_s"), (int, float))]
    return {
        "name": run_name(root, run_dir),
        "stage": status.get("stage") or config.get("stage") or next(iter(STAGES)),
        "status": run_state(run_dir, found) or ("saved" if checkpoints else "unknown"),
        "reason": status.get("reason"),
        "step": max(steps) if steps else int(config.get("step", 0) or 0),
        "total_steps": status.get("total_steps"),
        "best": best_evaluation(rows),
        "sparkline": sparkline(rows),
        "started": status.get("started"),
        "updated": status.get("updated"),
        "duration_s": elapsed[-1] if elapsed else None,
        "parent": parent,
        "checkpoints": [c.name for c in checkpoints],
        "notes": notes,
        **({"status_file": found, "config": without_template(config)} if details else {}),
    }


def without_template(config: dict[str, Any]) -> dict[str, Any]:
    """A checkpoint's config.json without the chat template (long, and not a setting)."""
    return {k: v for k, v in config.items() if k != "chat_template"}


def list_runs(root: Path) -> list[dict[str, Any]]:
    """Every run's record, in name order."""
    return [run_record(root, run_dir) for run_dir in find_runs(root)]
