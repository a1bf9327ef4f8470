"""A benchmark's result files (JSON, markdown, a plot), each complete or absent, and --out checked before any work.

`tinylm compare` and `tinylm speedrun` train for minutes before they write; a folder they cannot write
to is refused first, and the files are written aside and renamed together so that a full disk never
leaves a half table beside an old plot.
"""

from __future__ import annotations

import contextlib
import math
import statistics
import tempfile
from collections.abc import Callable
from pathlib import Path

from tinylm.errors import TinyLMError, io_failure


def check_writable(out: Path) -> None:
    """Refuse a read-only, full or forbidden --out in one line, before minutes of training are spent."""
    try:
        out.mkdir(parents=True, exist_ok=True)
        with tempfile.TemporaryFile(dir=out):
            pass
    except OSError as exc:
        raise TinyLMError(f"cannot write to --out {out}: {io_failure(exc)}") from None


def write_result_files(out: Path, texts: dict[str, str], plots: dict[str, Callable[[Path], object]],
                       what: str) -> None:
    """Write `texts` (name -> content) and `plots` (name -> draw(path)) into `out`, aside first, then renamed."""
    staged = {out / name: out / f".{name}.tmp" for name in (*texts, *plots)}
    try:
        for final, tmp in staged.items():
            if final.name in texts:
                tmp.write_text(texts[final.name], encoding="utf-8")
            else:
                plots[final.name](tmp)
        for final, tmp in staged.items():
            tmp.replace(final)
    except Exception as exc:
        reason = io_failure(exc)
        if reason is None:
            raise
        for tmp in staged.values():
            with contextlib.suppress(OSError):
                tmp.unlink()
        raise TinyLMError(f"cannot write {what} into {out}: {reason}") from None


def save_figure(fig: object, path: Path) -> Path:
    """A matplotlib figure as a PNG at `path`, closed whatever happens (a failed save must not leak it)."""
    import matplotlib.pyplot as plt

    try:
        fig.savefig(path, format="png", dpi=110)  # type: ignore[attr-defined]
    finally:
        plt.close(fig)  # type: ignore[arg-type]
    return path


def mean_std(values: list[float | None]) -> dict[str, float | None]:
    """Mean and standard deviation over the seeds of the finite values (None where there are none)."""
    known = [float(v) for v in values if v is not None and math.isfinite(float(v))]
    if not known:
        return {"mean": None, "std": None}
    return {"mean": statistics.fmean(known), "std": statistics.stdev(known) if len(known) > 1 else 0.0}
