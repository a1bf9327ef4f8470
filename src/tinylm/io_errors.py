"""Which exceptions mean the disk refused a write (read-only, full, no permission), and why, in a few words.

Python raises OSError; safetensors raises its own SafetensorError whose text carries the OS error
("I/O error: Read-only file system (os error 30)"). Both are the user's to fix, so both become one
line instead of a traceback.
"""

from __future__ import annotations

import re

_SAFETENSORS_IO = re.compile(r"I/O error: (.+?) \(os error \d+\)")


def io_failure(exc: BaseException) -> str | None:
    """The OS's reason ("No space left on device") when `exc` is a refused read or write, else None."""
    if isinstance(exc, OSError) and not isinstance(exc, BrokenPipeError):
        return exc.strerror or str(exc) or type(exc).__name__
    if type(exc).__name__ == "SafetensorError":
        found = _SAFETENSORS_IO.search(str(exc))
        return found.group(1) if found else None
    return None
