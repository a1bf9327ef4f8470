"""Windows that lie inside one document: rows for a long context, and position-true evaluation.

Pretraining draws windows at any offset, so a 1,024-token row from a corpus of short documents is
several documents side by side, and position 900 rarely depends on anything 900 tokens back. A
model whose context is being extended learns to use the far positions only from rows that are
one long document; `--long-documents` draws its rows from those alone (any window inside one, or with
`--document-ends` each one's last, where a passkey document asks its question). Each document is the tokens
up to and including its end-of-text; a window of seq_len + 1 tokens (inputs and targets) must fit
in one, so a document of n tokens offers n - seq_len starts.

Evaluation by position (`bpb_positions`) reads the same documents in tiles (non-overlapping windows
from each document's start), so position p of a window always has p tokens of its own document
before it.
"""

from __future__ import annotations

import numpy as np

from tinylm.errors import TinyLMError

CHUNK = 1 << 26  # tokens compared at a time
DOCUMENT_ENDS_NEED_LONG_DOCUMENTS = ("--document-ends draws each row as a long document's last tokens: it needs "
                                     "--long-documents")


class DocumentWindows:
    """The documents of a token shard, as (first token, length) spans, and the windows inside them."""

    def __init__(self, tokens: np.ndarray, eot_id: int) -> None:
        self.tokens = tokens
        # found a chunk at a time: a comparison over a whole 10-billion-token shard would hold 10 GB of booleans
        ends = np.concatenate([np.flatnonzero(tokens[at:at + CHUNK] == eot_id) + at
                               for at in range(0, len(tokens), CHUNK)] or [np.zeros(0, np.int64)])
        if len(ends) == 0 or ends[-1] != len(tokens) - 1:  # a last document with no end-of-text
            ends = np.append(ends, len(tokens) - 1)
        self.starts = np.concatenate(([0], ends[:-1] + 1)).astype(np.int64)
        self.lengths = (ends + 1 - self.starts).astype(np.int64)  # each with its end-of-text

    def longer_than(self, seq_len: int) -> int:
        """How many documents hold a whole window of seq_len + 1 tokens."""
        return int(np.count_nonzero(self.lengths > seq_len))

    def check_fits(self, seq_len: int) -> None:
        if not self.longer_than(seq_len):
            raise TinyLMError(f"no document holds a window of {seq_len + 1} tokens (the longest has "
                              f"{int(self.lengths.max())}): use shorter rows or longer documents")

    def sample(self, rng: np.random.Generator, count: int, seq_len: int) -> np.ndarray:
        """`count` window starts drawn uniformly from all windows that fit inside one document."""
        self.check_fits(seq_len)
        fits = np.maximum(self.lengths - seq_len, 0)
        total = int(fits.sum())
        cumulative = np.cumsum(fits)
        picks = rng.integers(0, total, size=count, dtype=np.int64)
        document = np.searchsorted(cumulative, picks, side="right")
        return self.starts[document] + picks - (cumulative[document] - fits[document])

    def sample_ends(self, rng: np.random.Generator, count: int, seq_len: int) -> np.ndarray:
        """`count` window starts, each the last window of a document drawn uniformly from those that hold one:
        what a document asks at its end (a passkey's question) is in every row, with a row of context behind."""
        self.check_fits(seq_len)
        long = np.flatnonzero(self.lengths > seq_len)
        document = long[rng.integers(0, len(long), size=count)]
        return self.starts[document] + self.lengths[document] - (seq_len + 1)

    def tiles(self, seq_len: int) -> np.ndarray:
        """Starts of non-overlapping windows from each document's first token, every one inside its document."""
        per_document = np.maximum((self.lengths - 1) // seq_len, 0)
        return np.concatenate([start + seq_len * np.arange(n, dtype=np.int64)
                               for start, n in zip(self.starts, per_document) if n] or [np.zeros(0, np.int64)])
