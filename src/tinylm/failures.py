"""What an exception becomes at the command line: one line on stderr and an exit code, not a traceback.

A problem the user can act on (a TinyLMError, an impossible model config, a read-only or full disk,
memory running out) is one line `tinylm: error: ...`; under torchrun every rank says which rank it
is, so N processes print N lines. A reader that closed our stdout early (`tinylm generate | head`)
is not an error at all: the command stops quietly. Anything else is a bug and keeps its traceback.
"""

from __future__ import annotations

import os
import re
import sys

from tinylm.errors import TinyLMError
from tinylm.io_errors import io_failure

USER_VALUE_ERRORS = ("invalid config", "invalid override", "unknown preset", "unknown arch")
CLOSED_PIPE_EXIT = 141  # what a shell reports for a process ended by SIGPIPE: `yes | head` gives the same


def error_prefix(environ: dict[str, str] | None = None) -> str:
    """`tinylm: error: `, naming the rank when torchrun started several processes."""
    environ = os.environ if environ is None else environ
    try:
        world = int(environ.get("WORLD_SIZE", "1"))
    except ValueError:
        world = 1
    if world <= 1:
        return "tinylm: error: "
    return f"tinylm: error: [rank {environ.get('RANK', '?')}/{world}] "


def user_message(exc: BaseException) -> str | None:
    """The one line for a failure the user can fix, or None when it is a bug."""
    if isinstance(exc, TinyLMError):
        return _first_line(exc)
    if isinstance(exc, ValueError) and str(exc).startswith(USER_VALUE_ERRORS):
        return _first_line(exc)
    if "torch" in sys.modules and is_out_of_memory(exc):
        return out_of_memory_message(exc)
    reason = io_failure(exc)
    if reason is not None:
        where = getattr(exc, "filename", None)
        return f"cannot use {where}: {reason}" if where else reason
    return None


def is_out_of_memory(exc: BaseException) -> bool:
    from tinylm.train.faults import is_oom

    return is_oom(exc)


def out_of_memory_message(exc: BaseException) -> str:
    asked = re.search(r"allocate (\d+) bytes", str(exc))
    size = f" (an allocation of {int(asked.group(1)) / 2**30:,.1f} GiB)" if asked else ""
    return f"out of memory{size}: ask for less (fewer tokens, a smaller batch or model) or free memory"


def silence_closed_stdout() -> None:
    """Point stdout at /dev/null once its reader has gone, so the flush at exit cannot fail a second time."""
    try:
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, sys.stdout.fileno())
        os.close(devnull)
    except (OSError, ValueError, AttributeError):  # a replaced sys.stdout (tests) has no real descriptor
        pass


def _first_line(exc: BaseException) -> str:
    lines = str(exc).strip().splitlines()
    return lines[0] if lines else type(exc).__name__
