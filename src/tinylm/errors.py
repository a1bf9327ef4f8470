"""Errors: the one exception type for user mistakes, and what any exception becomes at the command line.

A problem the user can act on (a TinyLMError, an impossible model config, a read-only or full disk,
memory running out) is one line `tinylm: error: ...`; under torchrun every rank says which rank it
is, so N processes print N lines. A reader that closed our stdout early (`tinylm generate | head`)
is not an error at all: the command stops quietly. Anything else is a bug and keeps its traceback.

Python raises OSError for a refused write; safetensors raises its own SafetensorError whose text
carries the OS error ("I/O error: Read-only file system (os error 30)"). Both are the user's to fix.

This module imports nothing of tinylm and not torch (it is read by every layer, `--help` included).
"""

from __future__ import annotations

import os
import re
import sys

USER_VALUE_ERRORS = ("invalid config", "invalid override", "unknown preset", "unknown arch")
CLOSED_PIPE_EXIT = 141  # what a shell reports for a process ended by SIGPIPE: `yes | head` gives the same
OOM_TEXTS = (
    "out of memory",  # CUDA, MPS, XPU
    "not enough memory",  # older CPU allocator
    "can't allocate memory",  # CPU: "DefaultCPUAllocator: can't allocate memory: you tried to allocate N bytes"
    "cannot allocate memory",  # the errno text (ENOMEM) that allocator message ends with
)
_SAFETENSORS_IO = re.compile(r"I/O error: (.+?) \(os error \d+\)")


class TinyLMError(Exception):
    """A problem the user can fix (bad path, impossible config, corrupt checkpoint...)."""


def io_failure(exc: BaseException) -> str | None:
    """The OS's reason ("No space left on device") when `exc` is a refused read or write, else None."""
    if isinstance(exc, OSError) and not isinstance(exc, BrokenPipeError):
        return exc.strerror or str(exc) or type(exc).__name__
    if type(exc).__name__ == "SafetensorError":
        found = _SAFETENSORS_IO.search(str(exc))
        return found.group(1) if found else None
    return None


def is_oom(exc: BaseException) -> bool:
    """Whether an exception says a device (or the CPU) ran out of memory, in any wording torch uses."""
    if isinstance(exc, MemoryError):
        return True
    torch = sys.modules.get("torch")  # an exception from torch means torch is loaded; never import it here
    if torch is not None and isinstance(exc, torch.OutOfMemoryError):
        return True
    text = str(exc).lower()
    return isinstance(exc, RuntimeError) and any(phrase in text for phrase in OOM_TEXTS)


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
    if "torch" in sys.modules and is_oom(exc):
        return out_of_memory_message(exc)
    reason = io_failure(exc)
    if reason is not None:
        where = getattr(exc, "filename", None)
        return f"cannot use {where}: {reason}" if where else reason
    return None


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
