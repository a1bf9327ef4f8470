"""RUN/status.json: what a run is doing, written by the run itself, so nothing has to guess from its log.

    {"status": "running", "stage": "sft", "step": 120, "total_steps": 1500, "pid": ..., "host": ...,
     "command": "tinylm sft ...", "started": "2026-12-02T03:40:01Z", "updated": "...", "reason": null}

The status is one of:

    running      written when training starts and again at every log row (the step it reached)
    finished     the run did what it was asked (--max-steps, --max-tokens, --time-budget)
    stopped      a SIGTERM asked it to stop: it saved, and `--resume latest` continues it
    interrupted  a Ctrl-C (SIGINT) did the same
    failed       it ended on an error; `reason` is the one line the command printed

A process killed without a word (kill -9, a lost machine) cannot write anything, so its status still
says running; its run lock (train/run_lock.py) is free, though, because the kernel drops a dead
process's lock. `run_state` puts the two together and calls such a run "died". The file is replaced
atomically, so a reader never sees half of it; only rank 0 writes it.
"""

from __future__ import annotations

import json
import os
import socket
import sys
import time
from pathlib import Path
from typing import Any

from tinylm.train.run_lock import lock_holder

STATUS_FILE = "status.json"
ENDED = {"max_steps": "finished", "max_tokens": "finished", "time_budget": "finished", "target": "finished",
         "nan": "failed"}


def _now() -> str:
    return time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())


def read_status(run_dir: str | Path) -> dict[str, Any] | None:
    """The run's status.json, or None when it has none or it cannot be read."""
    try:
        data = json.loads((Path(run_dir) / STATUS_FILE).read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError, json.JSONDecodeError):
        return None
    return data if isinstance(data, dict) else None


def run_state(run_dir: str | Path, status: dict[str, Any] | None = None) -> str | None:
    """The status as it stands: the file's, except that a "running" run whose lock is free has "died".

    `status` is the file's content when the caller has just read it (so it is not read twice).
    """
    status = read_status(run_dir) if status is None else status
    if status is None:
        return None
    if status.get("status") == "running" and lock_holder(run_dir) is None:
        return "died"
    return status.get("status")


class RunStatus:
    """Writes one run's status.json (on rank 0; a no-op elsewhere)."""

    def __init__(self, run_dir: Path, stage: str, active: bool = True, world_size: int = 1) -> None:
        self.file = run_dir / STATUS_FILE
        self.active = active
        self.fields: dict[str, Any] = {"status": "running", "stage": stage, "step": 0, "total_steps": None,
                                       "pid": os.getpid(), "host": socket.gethostname(), "world_size": world_size,
                                       # torchrun's own pid when it started this process: a stop signals its
                                       # children, the workers (studio/launch.py stop)
                                       "launcher_pid": os.getppid() if "TORCHELASTIC_RUN_ID" in os.environ else None,
                                       "command": " ".join([Path(sys.argv[0]).name, *sys.argv[1:]]),
                                       "started": _now(), "reason": None}

    def running(self, step: int, total_steps: int | None = None) -> None:
        if total_steps is not None:
            self.fields["total_steps"] = total_steps
        self._write(status="running", step=step)

    def ended(self, stopped: str, signal_name: str | None, step: int, reason: str | None = None) -> None:
        """The end of a run the loop finished: by its budget, a signal (stopped / interrupted) or a NaN."""
        if stopped == "interrupted":
            status = "stopped" if signal_name == "SIGTERM" else "interrupted"
        else:
            status = ENDED[stopped]
        self._write(status=status, step=step, reason=reason)

    def failed(self, reason: str) -> None:
        self._write(status="failed", reason=reason.strip().splitlines()[0] if reason.strip() else "error")

    def _write(self, **fields: Any) -> None:
        if not self.active:
            return
        self.fields.update(fields, updated=_now())
        tmp = self.file.with_name(f".{STATUS_FILE}.tmp-{os.getpid()}")
        try:
            tmp.write_text(json.dumps(self.fields, indent=2) + "\n", encoding="utf-8")
            os.replace(tmp, self.file)
        except OSError:  # a full disk must not end the run; the checkpoints say what was kept
            tmp.unlink(missing_ok=True)
