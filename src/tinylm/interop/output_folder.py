"""The output folder of export and import: written whole or not at all, and a refused write is one line.

`atomic_directory` already guarantees that `--out` appears only once complete; this adds the
message. A read-only location, a full disk or a missing permission is reported as
`cannot write OUT: <the OS's reason>`, and nothing is left behind.
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

from tinylm.errors import TinyLMError, io_failure
from tinylm.interop.atomic_dir import atomic_directory


@contextmanager
def output_folder(out: str | Path) -> Iterator[Path]:
    """`atomic_directory(out)`, with a write the disk refuses turned into one TinyLMError line."""
    try:
        with atomic_directory(out) as folder:
            yield folder
    except TinyLMError:
        raise
    except Exception as exc:
        reason = io_failure(exc)
        if reason is None:
            raise
        raise TinyLMError(f"cannot write {out}: {reason} (nothing was written)") from None
