"""Reading a run's metrics.jsonl as it grows: only the bytes past where the last read stopped.

A page that watches a run asks for the rows after its offset; the studio reads from there to the last
complete line and answers with the new offset, so each update costs the new lines, never the file
again. A half-written last line waits for the next read. A file shorter than the offset was rewritten
(a resumed run drops the rows past its checkpoint, metrics.truncate_after): the reader starts over
and says `reset`, so the page redraws from the rows it is sent.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from tinylm.metrics import METRICS, parse_rows

MAX_READ = 4 << 20  # bytes per answer: a 20,000-step log (~4 MB) comes in one or two


@dataclass
class Update:
    rows: list[dict[str, Any]]
    offset: int
    reset: bool = False
    damaged: list[str] = field(default_factory=list)
    first_line: int = 1


def read_after(run_dir: Path, offset: int, line: int = 1) -> Update:
    """The rows of complete lines after byte `offset` (line number `line` there), and where the next read starts."""
    path = run_dir / METRICS
    try:
        size = path.stat().st_size
    except OSError:
        return Update([], 0, reset=offset > 0)
    reset = offset > size
    if reset:
        offset, line = 0, 1
    if offset == size:
        return Update([], offset, reset, first_line=line)
    with path.open("rb") as f:
        f.seek(offset)
        data = f.read(MAX_READ)
    rows, damaged, used = parse_rows(data, first_line=line)
    return Update(rows, offset + used, reset, damaged, line + data[:used].count(b"\n"))
