"""The default corpus: the Python standard library's own source, read from the running interpreter.

Every machine that runs tinylm has it, so the first demo needs no download, and it is real text no
one here wrote: about 12 MB of code, docstrings and comments in some 800 files. Folders of tests
(`test`, `tests`, `*_test`, `*_tests`) are left out, since the test suites are large, repetitive and
full of deliberately odd data, and so is `site-packages` (installed third-party packages, which
differ from machine to machine). One document per file, in sorted path order.
"""

from __future__ import annotations

import hashlib
import sys
import sysconfig
from collections.abc import Iterator
from pathlib import Path

from tinylm.data.corpus import Corpus, ReadStats
from tinylm.data.text import read_text_file
from tinylm.errors import TinyLMError

EXCLUDED_DIRS = {"test", "tests", "site-packages", "__pycache__"}


def stdlib_root() -> Path:
    return Path(sysconfig.get_paths()["stdlib"])


def _excluded(folder: str) -> bool:
    return folder in EXCLUDED_DIRS or folder.endswith(("_test", "_tests")) or folder.startswith(".")


def stdlib_files(root: Path | None = None) -> list[Path]:
    """The `.py` files of the standard library, without tests and site-packages, sorted by relative path."""
    root = stdlib_root() if root is None else root
    files = [p for p in root.rglob("*.py") if p.is_file()
             and not any(_excluded(part) for part in p.relative_to(root).parts[:-1])]
    return sorted(files, key=lambda p: p.relative_to(root).as_posix())


def pystdlib_corpus() -> Corpus:
    root = stdlib_root()
    files = stdlib_files(root)
    if not files:
        raise TinyLMError(f"no standard library sources found under {root} "
                          "(is this Python installed without them?)")
    sizes = [p.stat().st_size for p in files]
    listing = "\n".join(f"{p.relative_to(root).as_posix()}\t{s}" for p, s in zip(files, sizes))
    digest = hashlib.sha256(f"{sys.version}\n{listing}".encode()).hexdigest()

    def read(stats: ReadStats) -> Iterator[str]:
        for path in files:
            text, replaced = read_text_file(path)
            stats.replaced += replaced
            yield text

    return Corpus(spec="pystdlib", fingerprint=digest, read=read, total_bytes=sum(sizes))
