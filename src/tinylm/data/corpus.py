"""A corpus: an ordered, re-readable stream of documents, whatever `--corpus` named.

`sources.open_corpus` turns the spec into a `Corpus`, checking everything that can be checked without
reading the text (the path exists, the files have a known kind, the `datasets` library is there),
so a typo fails in milliseconds. Reading happens later through `documents()`, which can be
called more than once: prepare reads the train split once to train the BPE, then everything once
to encode it. The order is deterministic, so the same corpus always gives the same shards.

Specs: `pystdlib` (the default), a local file, folder or glob (see `files.py`), and
`hf:NAME[:CONFIG][:SPLIT]` (see `hf.py`).
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from dataclasses import dataclass, field

REPLACEMENT = "\ufffd"


@dataclass
class ReadStats:
    """What reading a corpus met besides text: fixed-up documents, empty ones, replacement characters."""

    replaced: int = 0  # documents in which undecodable bytes became U+FFFD
    empty: int = 0  # empty or all-whitespace documents, skipped
    characters: int = 0  # characters of the documents kept
    replacements: int = 0  # of those, U+FFFD (undecodable bytes, lone surrogates, or the character itself)

    @property
    def replacement_share(self) -> float:
        """The share of the text that is U+FFFD: near 1 for a file in another encoding, or binary."""
        return self.replacements / self.characters if self.characters else 0.0


@dataclass
class Corpus:
    """A corpus named by `spec`; `read(stats)` yields its documents in order, counting oddities in `stats`."""

    spec: str  # normalised spec, recorded in the sidecars
    fingerprint: str  # cheap identity of the current content: changes when the files change
    read: Callable[[ReadStats], Iterator[str]]
    total_bytes: int | None = None  # for the progress bar, when known up front
    skipped: list[str] = field(default_factory=list)  # files a folder or glob held that are of no known kind
    stats: ReadStats = field(default_factory=ReadStats)

    def documents(self) -> Iterator[str]:
        """The documents, in order, without empty ones; `stats` counts this pass."""
        self.stats = ReadStats()
        for text in self.read(self.stats):
            if text.strip():
                self.stats.characters += len(text)
                self.stats.replacements += text.count(REPLACEMENT)
                yield text
            else:
                self.stats.empty += 1

