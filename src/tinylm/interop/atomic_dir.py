"""Write a whole output folder or nothing: build it under a hidden temporary name, then rename it.

A rename within one filesystem is atomic, so an error (or a crash) half-way through an export or an
import leaves `--out` exactly as it was: absent, never half-written.
"""

from __future__ import annotations

import os
import shutil
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

from tinylm.errors import TinyLMError


@contextmanager
def atomic_directory(out: str | Path) -> Iterator[Path]:
    """Yield a fresh temporary folder next to `out`; on success it becomes `out`, on error it vanishes."""
    out = Path(out)
    if out.exists() and (not out.is_dir() or any(out.iterdir())):
        raise TinyLMError(f"output folder {out} already exists and is not empty: choose another --out")
    out.parent.mkdir(parents=True, exist_ok=True)
    tmp = out.parent / f".tmp-{out.name}-{os.getpid()}"
    if tmp.exists():
        shutil.rmtree(tmp)
    tmp.mkdir()
    try:
        yield tmp
        if out.exists():  # an empty folder the user made for us
            out.rmdir()
        os.replace(tmp, out)
    finally:
        if tmp.exists():
            shutil.rmtree(tmp, ignore_errors=True)
