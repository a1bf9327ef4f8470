"""Long documents are cut into pieces at line breaks, so one big file still gives a train and a dev split.

The dev split is chosen per document (`split.py`), so a corpus that is one 1 MB text file, one
document, would always leave one split empty. Cutting every document longer than `max_chars`
characters (64 Ki by default, 64 KiB of ASCII, ~16k tokens: far longer than any context window)
into pieces of at most that many gives such a file ~16 documents for the hash to spread. A piece
ends after the last line break that fits; a single line longer than the limit is cut at the limit.
The pieces are the documents from then on: each is hashed for its split and followed by an EOT.
Documents up to the limit, which is nearly all of them in ordinary corpora, are left exactly as
they are. `max_chars=0` turns the cutting off.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator

MAX_DOCUMENT_CHARS = 1 << 16


def cut_document(text: str, max_chars: int = MAX_DOCUMENT_CHARS) -> list[str]:
    """`text` as pieces of at most `max_chars` characters, cut after line breaks where one fits."""
    if max_chars <= 0 or len(text) <= max_chars:
        return [text]
    pieces: list[str] = []
    start = 0
    while len(text) - start > max_chars:
        end = text.rfind("\n", start, start + max_chars) + 1
        if end <= start:  # no line break within the limit: cut the over-long line itself
            end = start + max_chars
        pieces.append(text[start:end])
        start = end
    pieces.append(text[start:])
    return pieces


def cut_documents(documents: Iterable[str], max_chars: int = MAX_DOCUMENT_CHARS) -> Iterator[str]:
    """Every document of `documents`, long ones cut by `cut_document`, in order."""
    for text in documents:
        yield from cut_document(text, max_chars)
