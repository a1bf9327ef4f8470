"""Choosing the run folder and the checkpoint to resume from, so that no choice destroys history.

Without `--out`, a run goes to `runs/<name>` (the stage's: `tiny-modern` for pretraining, `<base run>-sft`...), or
`runs/<name>-2`, `-3`, ... when
that one already holds a trained run (or is in use by a live one), so `make demo` twice never
clobbers or refuses. An explicit `--out` that already holds checkpoints is refused unless `--resume`
says to continue it: mixing two runs in one folder would silently corrupt both logs.

Resuming continues the newest checkpoint that has full training state. Anything that would restart
a run folder's step count over its existing checkpoints (a weights-only checkpoint, an older
checkpoint, another run's checkpoint) is refused with the command that does it safely, because the
restarted run would truncate metrics.jsonl and its pruning would delete the checkpoints it passed.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from tinylm.checkpoint import (
    CHECKPOINTS,
    TRAIN_STATE,
    has_train_state,
    list_checkpoints,
    newest_resumable,
    resolve_checkpoint,
)
from tinylm.errors import TinyLMError
from tinylm.train.run_lock import lock_holder


def _default_candidates(base: Path) -> list[Path]:
    numbered = [p for p in base.parent.glob(f"{base.name}-*") if p.name[len(base.name) + 1:].isdigit()]
    return [base, *sorted(numbered, key=lambda p: int(p.name[len(base.name) + 1:]))]


def choose_run_dir(out: str | None, name: str, resume: str | None) -> Path:
    """The run folder: `out` as given, or a default that is fresh (or, when resuming, the newest)."""
    if out:
        return Path(out)
    base = Path("runs") / name
    candidates = _default_candidates(base)
    if resume == "latest":
        trained = [p for p in candidates if list_checkpoints(p)]
        return max(trained, key=lambda p: list_checkpoints(p)[-1].stat().st_mtime) if trained else base
    for candidate in candidates:
        if not list_checkpoints(candidate) and lock_holder(candidate) is None:
            return candidate
    return base.parent / f"{base.name}-{len(candidates) + 1}"


@dataclass(frozen=True)
class ResumePlan:
    """Where a run starts: `checkpoint` None is a fresh run; `notes` are lines to print before training."""

    checkpoint: Path | None
    notes: tuple[str, ...] = ()


def _names(paths: list[Path]) -> str:
    return ", ".join(p.name for p in paths)


def _latest(run_dir: Path) -> ResumePlan:
    existing = list_checkpoints(run_dir)
    if not existing:
        return ResumePlan(None)
    found, skipped = newest_resumable(run_dir)
    if found is None:
        raise TinyLMError(f"run folder {run_dir} has only weights-only checkpoints (no {TRAIN_STATE}), so there is "
                          f"nothing to resume: train their weights into a new folder with "
                          f"--resume {existing[-1]} --out NEW")
    if skipped:
        return ResumePlan(found, (f"resuming from {found.name}, the newest checkpoint with full training state "
                                  f"(skipping the newer weights-only {_names(skipped)}, left as they are)",))
    return ResumePlan(found)


def _inside(checkpoint: Path, run_dir: Path) -> bool:
    return checkpoint.resolve().parent == (run_dir / CHECKPOINTS).resolve()


def _refuse_restart_over_history(checkpoint: Path, run_dir: Path) -> None:
    """Refuse a `--resume PATH` whose continuation would write over run_dir's existing checkpoints."""
    existing = list_checkpoints(run_dir)
    if not existing:
        return
    resumable, _ = newest_resumable(run_dir)
    if not _inside(checkpoint, run_dir):
        raise TinyLMError(f"run folder {run_dir} already holds checkpoints of another run (newest "
                          f"{existing[-1].name}); continue {checkpoint} with another --out")
    if not has_train_state(checkpoint):
        keep = (f"continue from {resumable.name} (full state) with --resume latest, or " if resumable else "")
        raise TinyLMError(f"{checkpoint} has no {TRAIN_STATE}: resuming it would restart {run_dir} at step 0 over "
                          f"its checkpoints; {keep}train its weights into a new --out")
    if resumable is not None and resumable.resolve() != checkpoint.resolve():
        raise TinyLMError(f"{checkpoint.name} is older than {resumable.name} in {run_dir}: resuming it there would "
                          f"overwrite the later history; use --resume latest, or branch with --out NEW")


def plan_resume(resume: str | None, run_dir: Path) -> ResumePlan:
    """The checkpoint to continue from (`--resume latest`, a run folder or a checkpoint folder), or refusal."""
    if resume is None:
        existing = list_checkpoints(run_dir)
        if existing:
            raise TinyLMError(f"run folder {run_dir} already has checkpoints (newest {existing[-1].name}); "
                              "pass --resume latest to continue it, or choose another --out")
        return ResumePlan(None)
    if resume == "latest":
        return _latest(run_dir)
    target = Path(resume)
    checkpoint = resolve_checkpoint(target)
    notes: tuple[str, ...] = ()
    named_run, _ = newest_resumable(checkpoint.parent.parent)
    if checkpoint.resolve() != target.resolve() and named_run is not None:
        # a run folder was named: as with `latest`, its newest checkpoint with full state
        checkpoint, notes = named_run, _latest(checkpoint.parent.parent).notes
    _refuse_restart_over_history(checkpoint, run_dir)
    return ResumePlan(checkpoint, notes)
