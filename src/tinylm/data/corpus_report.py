"""What prepare says about the text it read, and the one kind of text it refuses: mostly not UTF-8.

Undecodable bytes become U+FFFD (`text.py`) and files of unknown kinds are skipped (`files.py`);
both used to be visible only in a sidecar, so a folder of Latin-1 files or a corpus whose text sat
in `.csv` files was "prepared" without a word. Now each gets one line on the console, and a corpus
in which more than `MAX_REPLACEMENT_SHARE` of the characters are U+FFFD (another encoding, or
binary data without NUL bytes) is refused unless `--allow-invalid-utf8` says it is meant.
"""

from __future__ import annotations

from collections import Counter
from pathlib import Path

from tinylm.data.corpus import Corpus
from tinylm.data.files import SUPPORTED
from tinylm.errors import TinyLMError

MAX_REPLACEMENT_SHARE = 0.10


def check_replacements(corpus: Corpus, allow_invalid_utf8: bool) -> None:
    """TinyLMError when more than MAX_REPLACEMENT_SHARE of the text read so far is U+FFFD (unless allowed)."""
    stats = corpus.stats
    if allow_invalid_utf8 or stats.replacement_share <= MAX_REPLACEMENT_SHARE:
        return
    raise TinyLMError(f"corpus {corpus.spec} is mostly not UTF-8: {stats.replacement_share:.0%} of its characters "
                      f"({stats.replacements:,} of {stats.characters:,}) are U+FFFD replacements for undecodable "
                      "bytes (another encoding, or binary data?); convert it to UTF-8, or pass "
                      "--allow-invalid-utf8 to prepare it anyway")


def _count(n: int, noun: str) -> str:
    return f"{n:,} {noun}" if n == 1 else f"{n:,} {noun}s"


def replacement_note(corpus: Corpus) -> str | None:
    """One line on documents whose bytes were not UTF-8, or None when there were none."""
    stats = corpus.stats
    if not stats.replaced:
        return None
    share = f"{stats.replacement_share:.2%}" if stats.replacement_share >= 1e-4 else "under 0.01%"
    return (f"{_count(stats.replaced, 'document')} held bytes that are not UTF-8, replaced by U+FFFD: "
            f"{stats.replacements:,} of {stats.characters:,} characters ({share})")


def skipped_note(corpus: Corpus) -> str | None:
    """One line on the files of other kinds a folder or glob held, or None when there were none."""
    if not corpus.skipped:
        return None
    kinds = Counter(Path(path).suffix.lower() or "no extension" for path in corpus.skipped)
    listing = ", ".join(f"{count} {kind}" for kind, count in sorted(kinds.items(), key=lambda kv: (-kv[1], kv[0])))
    return (f"skipped {_count(len(corpus.skipped), 'file')} of other kinds ({listing}); "
            f"tinylm reads {', '.join(SUPPORTED)}")
