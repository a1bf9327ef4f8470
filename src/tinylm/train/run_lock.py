"""One run per folder: an OS lock on RUN/.lock, refused to a second run, released when its holder dies.

Two runs writing one folder both exit 0 while their metrics.jsonl rows interleave and each replaces
the other's checkpoints. `fcntl.flock` is held by the kernel for the open file and dropped when the
holding process ends in any way, kill -9 included, so a lock never outlives its run and no pid
guessing is needed to tell a live holder from a dead one. The file also records who holds it (pid,
host, command, start time) so that a refusal names the other run; a record still there while the
lock is free was left by a holder that died, and taking it over says so.
"""

from __future__ import annotations

import json
import os
import socket
import sys
import time
from pathlib import Path
from types import TracebackType
from typing import Any

from tinylm.errors import TinyLMError

try:
    import fcntl
except ImportError:  # Windows: no advisory locks; runs are then not kept apart
    fcntl = None  # type: ignore[assignment]

LOCK_FILE = ".lock"


def _holder_record() -> dict[str, Any]:
    command = " ".join([Path(sys.argv[0]).name if sys.argv else "python", *sys.argv[1:]])
    return {"pid": os.getpid(), "host": socket.gethostname(), "command": command.replace("\n", " "),
            "since": time.strftime("%Y-%m-%d %H:%M:%S UTC", time.gmtime())}


def _read_record(fd: int) -> dict[str, Any] | None:
    try:
        data = json.loads(os.pread(fd, 65536, 0).decode("utf-8") or "null")
    except (OSError, UnicodeDecodeError, json.JSONDecodeError):
        return None
    return data if isinstance(data, dict) else None


def describe_holder(record: dict[str, Any] | None) -> str:
    """'pid 123 on host (tinylm train --out runs/a, since 2026-12-01 07:30:00 UTC)', or a vaguer phrase."""
    if not record:
        return "another process"
    return (f"pid {record.get('pid')} on {record.get('host')} "
            f"({record.get('command')}, since {record.get('since')})")


class RunLock:
    """Exclusive hold on a run folder for the life of this object (or `with` block, or process).

    `acquire()` returns a note to print when it took over a stale record or cannot lock at all, else None.
    """

    def __init__(self, run_dir: str | Path) -> None:
        self.run_dir = Path(run_dir)
        self.path = self.run_dir / LOCK_FILE
        self._fd: int | None = None
        self.note: str | None = None  # what `acquire` had to say, for a `with` block

    @property
    def held(self) -> bool:
        return self._fd is not None

    def acquire(self) -> str | None:
        if self._fd is not None:
            return None
        try:
            self.run_dir.mkdir(parents=True, exist_ok=True)
            fd = os.open(self.path, os.O_RDWR | os.O_CREAT, 0o666)
        except OSError as exc:
            raise TinyLMError(f"cannot use run folder {self.run_dir}: {exc.strerror or exc}") from None
        note = None
        if fcntl is None:
            note = f"note: this system has no file locks; nothing stops a second run from writing {self.run_dir}"
        else:
            try:
                fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
            except BlockingIOError:
                holder = describe_holder(_read_record(fd))
                os.close(fd)
                raise TinyLMError(f"run folder {self.run_dir} is in use by {holder}: wait for it to end "
                                  "or choose another --out") from None
            except OSError as exc:  # a filesystem without locks (some network mounts)
                note = f"note: cannot lock {self.path} ({exc.strerror}); nothing stops a second run in this folder"
        previous = _read_record(fd)
        if previous is not None and note is None:
            note = (f"note: taking over {self.run_dir} from {describe_holder(previous)}, "
                    "which ended without releasing it")
        os.ftruncate(fd, 0)
        os.pwrite(fd, (json.dumps(_holder_record()) + "\n").encode("utf-8"), 0)
        self._fd, self.note = fd, note
        return note

    def release(self) -> None:
        """Clear the record (a clean end leaves an empty file) and drop the lock."""
        if self._fd is None:
            return
        fd, self._fd = self._fd, None
        try:
            os.ftruncate(fd, 0)
        except OSError:
            pass
        finally:
            os.close(fd)  # closing the file drops the flock

    def __enter__(self) -> RunLock:
        self.acquire()
        return self

    def __exit__(self, kind: type[BaseException] | None, error: BaseException | None,
                 trace: TracebackType | None) -> None:
        self.release()


def lock_holder(run_dir: str | Path) -> str | None:
    """Who holds the run folder now (as `describe_holder` says it), or None when it is free."""
    path = Path(run_dir) / LOCK_FILE
    if fcntl is None or not path.is_file():
        return None
    try:
        fd = os.open(path, os.O_RDWR)
    except OSError:
        return None
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
        return describe_holder(_read_record(fd))
    except OSError:
        return None
    finally:
        os.close(fd)
    return None
