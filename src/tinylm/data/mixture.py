"""`A+B`: one corpus made of several, their documents one after the other.

Documents are split into train and dev by a hash of their text and training draws windows at
random offsets, so the order of the parts does not matter to what a model learns; their sizes do.
"""

from __future__ import annotations

import hashlib
from collections.abc import Iterator

from tinylm.data.corpus import Corpus, ReadStats


def mixed_corpus(parts: list[Corpus]) -> Corpus:
    """The documents of every part in turn; the spec and fingerprint name all of them."""
    def read(stats: ReadStats) -> Iterator[str]:
        for part in parts:
            yield from part.read(stats)

    fingerprint = hashlib.sha256("\n".join(part.fingerprint for part in parts).encode()).hexdigest()
    sizes = [part.total_bytes for part in parts]
    total = sum(size for size in sizes if size is not None) if any(sizes) else None
    return Corpus(spec="+".join(part.spec for part in parts), fingerprint=fingerprint, read=read,
                  total_bytes=total, skipped=[path for part in parts for path in part.skipped])
