"""Reading a run's metrics.jsonl as it grows: only the bytes past where the last read stopped.

A page that watches a run asks for the rows after its offset; the studio reads from there to the last
complete line and answers with the new offset, so each update costs the new lines, never the file
again. A half-written last line waits for the next read. A file shorter than the offset was rewritten
(a resumed run drops the rows past its checkpoint, metrics.truncate_after): the reader starts over
and says `reset`, so the page redraws from the rows it is sent.

A live stream (GET /api/events) never ends by itself: the page keeps it open. So the studio's server
(`StudioServer`) first tells every stream to end when it stops, and each one, waiting between polls on
that word rather than sleeping, ends at once; uvicorn then has no open response to wait for, or to
cancel with an ERROR line after its grace period.
"""

from __future__ import annotations

import asyncio
import socket
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import uvicorn

from tinylm.metrics import METRICS, parse_rows
from tinylm.train.run_status import STATUS_FILE, read_status, run_state

MAX_READ = 16 << 20  # bytes per answer: a 20,000-step log (~4.4 MB) comes in one, a 70,000-step one too
LOCK_EVERY = 4  # polls between checks of a "running" run's lock (a died run shows within ~2 s)


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


class RunWatch:
    """What a live page of one run needs at each poll, for the least work: the new rows, and the status.

    status.json is read again only when it was replaced or changed (inode, mtime, size), and the lock of a run
    that says "running" is tried only every LOCK_EVERY polls (it is how a dead run shows), so a page
    open on an idle or steady run costs a few stat calls a second.
    """

    def __init__(self, run_dir: Path) -> None:
        self.run_dir = run_dir
        self.stamp: tuple[int, int, int] | None = None
        self.status: dict[str, Any] | None = None
        self.state: str | None = None
        self.polls = 0

    def poll(self, offset: int, line: int) -> tuple[Update, bool]:
        """(the rows after `offset`, whether the status or state changed since the last poll)."""
        update = read_after(self.run_dir, offset, line)
        try:
            found = self.run_dir.joinpath(STATUS_FILE).stat()
            stamp: tuple[int, int, int] | None = (found.st_ino, found.st_mtime_ns, found.st_size)  # replaced: ino
        except OSError:
            stamp = None
        before = (self.status, self.state)
        if stamp != self.stamp or self.stamp is None:
            self.stamp, self.status = stamp, read_status(self.run_dir)
            self.state = run_state(self.run_dir, self.status)
        elif self.status is not None and self.status.get("status") == "running" and self.polls % LOCK_EVERY == 0:
            self.state = run_state(self.run_dir, self.status)
        self.polls += 1
        return update, (self.status, self.state) != before or self.polls == 1


async def stopped_within(stopping: asyncio.Event, seconds: float) -> bool:
    """Wait `seconds` between two polls of a live stream, or less when the studio begins to stop; whether it does."""
    try:
        await asyncio.wait_for(stopping.wait(), seconds)
    except TimeoutError:
        return False
    return True


class StudioServer(uvicorn.Server):
    """uvicorn's server, which ends the live streams (the app's `state.stopping`) before it waits for open
    responses, so a SIGTERM stops the studio in a fraction of a second with an open page."""

    async def shutdown(self, sockets: list[socket.socket] | None = None) -> None:
        stopping = getattr(getattr(self.config.app, "state", None), "stopping", None)
        if isinstance(stopping, asyncio.Event):
            stopping.set()
        await super().shutdown(sockets)
