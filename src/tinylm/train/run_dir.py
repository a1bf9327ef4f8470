"""Choosing the run folder and the checkpoint to resume from.

Without `--out`, a run goes to `runs/<preset>-<arch>`, or `runs/<preset>-<arch>-2`, `-3`, ... when
that one already holds a trained run, so `make demo` twice never clobbers or refuses. An explicit
`--out` that already holds checkpoints is refused unless `--resume` says to continue it: mixing two
runs in one folder would silently corrupt both logs.
"""

from __future__ import annotations

from pathlib import Path

from tinylm.errors import TinyLMError
from tinylm.checkpoint import list_checkpoints, resolve_checkpoint


def _default_candidates(base: Path) -> list[Path]:
    numbered = [p for p in base.parent.glob(f"{base.name}-*") if p.name[len(base.name) + 1:].isdigit()]
    return [base, *sorted(numbered, key=lambda p: int(p.name[len(base.name) + 1:]))]


def choose_run_dir(out: str | None, preset: str, arch: str, resume: str | None) -> Path:
    """The run folder: `out` as given, or a default that is fresh (or, when resuming, the newest)."""
    if out:
        return Path(out)
    base = Path("runs") / f"{preset}-{arch}"
    candidates = _default_candidates(base)
    if resume == "latest":
        trained = [p for p in candidates if list_checkpoints(p)]
        return max(trained, key=lambda p: list_checkpoints(p)[-1].stat().st_mtime) if trained else base
    for candidate in candidates:
        if not list_checkpoints(candidate):
            return candidate
    return base.parent / f"{base.name}-{len(candidates) + 1}"


def find_resume_checkpoint(resume: str | None, run_dir: Path) -> Path | None:
    """The checkpoint to continue from: None for a fresh run; `latest` with none yet starts fresh."""
    if resume is None:
        existing = list_checkpoints(run_dir)
        if existing:
            raise TinyLMError(f"run folder {run_dir} already has checkpoints (newest {existing[-1].name}); "
                              "pass --resume latest to continue it, or choose another --out")
        return None
    if resume == "latest":
        existing = list_checkpoints(run_dir)
        return existing[-1] if existing else None
    return resolve_checkpoint(resume)
