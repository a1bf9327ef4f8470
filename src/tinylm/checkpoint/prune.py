"""Removing checkpoints, and what crashed saves and prunes left behind, without ever showing half of one.

A pruned checkpoint is renamed to a hidden `.trash-` name first and deleted after, so a `kill -9`
in the middle leaves a hidden folder, never a `step_N` without its weights; `sweep_leftovers`
removes such folders (and interrupted saves) at the next save or run start.
"""

from __future__ import annotations

import os
import re
import shutil
from pathlib import Path

from tinylm.checkpoint.layout import CHECKPOINTS, CONFIG, STEP_NAME, WEIGHTS, has_train_state, is_complete

_LEFTOVER = re.compile(r"^\.(tmp|trash|old)-(step_\d+)-\d+$")


def checkpoints_to_prune(checkpoints: list[Path], keep_last: int) -> list[Path]:
    """All but the newest `keep_last` (oldest first), sparing the newest one a run can resume from."""
    if keep_last <= 0:
        return []
    resumable = [path for path in checkpoints if has_train_state(path)]
    spared = resumable[-1] if resumable else None
    return [path for path in checkpoints[:-keep_last] if path != spared]


def remove_checkpoint(path: Path) -> None:
    """Rename to a hidden `.trash-` name (atomic: never seen half-deleted), then delete."""
    trash = path.parent / f".trash-{path.name}-{os.getpid()}"
    os.replace(path, trash)
    shutil.rmtree(trash, ignore_errors=True)


def sweep_leftovers(run_dir: str | Path) -> list[str]:
    """Remove what crashed saves and prunes left in RUN/checkpoints; one line per thing done.

    `.tmp-` (a save cut short) and `.trash-` (a prune cut short) folders go; an `.old-` folder is the
    previous copy of a step being saved again and is put back if the new copy never arrived; a step
    folder without its weights (half-deleted by an older tinylm) goes. One that still has its weights
    but lost config.json is left for its owner: `resolve_checkpoint` names what is missing.
    Only the process that holds the run folder's lock may call this.
    """
    root = Path(run_dir) / CHECKPOINTS
    if not root.is_dir():
        return []
    done: list[str] = []
    for child in sorted(root.iterdir()):
        leftover = _LEFTOVER.match(child.name)
        if leftover and leftover.group(1) == "old" and not (root / leftover.group(2)).exists() and is_complete(child):
            os.replace(child, root / leftover.group(2))
            done.append(f"restored {leftover.group(2)} from an interrupted re-save")
        elif leftover or (STEP_NAME.match(child.name) and child.is_dir() and not (child / WEIGHTS).is_file()):
            shutil.rmtree(child, ignore_errors=True)
            what = {"tmp": "an interrupted save", "trash": "an interrupted prune", "old": "a finished re-save"}
            done.append(f"removed {child.name} ({what[leftover.group(1)] if leftover else 'no weights'})")
    for stale in root.glob(f"step_*/.{CONFIG}.tmp-*"):  # an interrupted update_checkpoint_config
        stale.unlink(missing_ok=True)
    return done
