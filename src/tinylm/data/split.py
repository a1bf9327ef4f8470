"""Which documents are held out: a stable hash of each document's text decides.

A document goes to dev when the first 8 bytes of its BLAKE2b digest, read as a number in [0, 1),
fall below `dev_fraction`. The decision depends on the text alone, not on the document's position,
the file it came from, the machine, the Python version or a random seed: the same document is in
the same split in every run, adding documents never moves old ones, and two copies of a document
always land together, so train and dev never share a document.
"""

from __future__ import annotations

import hashlib

_SCALE = float(1 << 64)


def dev_score(data: bytes) -> float:
    """The document's position in [0, 1) for the split decision (`data` is its UTF-8 text)."""
    return int.from_bytes(hashlib.blake2b(data, digest_size=8).digest(), "big") / _SCALE


def is_dev(data: bytes, dev_fraction: float) -> bool:
    """True when the document (UTF-8 bytes) belongs to the held-out split."""
    return dev_score(data) < dev_fraction
