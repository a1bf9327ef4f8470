"""Bounding the tokenizer's work per pre-token: over-long runs of non-space (or space) are cut into pieces.

A byte-level BPE first splits text with a regular expression into pre-tokens (a word with its
leading space, a number, a run of punctuation or of whitespace) and merges within each one. Both
engines spend time quadratic in a pre-token's length, in training (`tokenizers`) and in encoding
(`tiktoken`): 200 KB of letters without a space (a DNA sequence) took 23 s to prepare, 1 MB over
five minutes. Every
pre-token of the GPT-2 pattern lies inside one run of non-whitespace (plus at most one space
before it) or one run of whitespace, so cutting each run longer than `max_run` characters into
pieces of at most `max_run`, and tokenizing the pieces separately, bounds every pre-token and keeps
the whole pass linear in the corpus size.

Exactness:
- Text whose lines are at most `max_run` (1024) characters long has no such run: it is one piece
  and encodes exactly as before. That is every line of the standard library, and ordinary prose
  and code.
- In a longer run, a cut goes where the GPT-2 pattern splits anyway, if one lies within the last
  `SEARCH_CHARS` characters before the bound: between a letter, a digit and anything else, never
  right after an apostrophe (`'s`, `'ll` are pre-tokens). With tinylm's BPE and r50k, such text (a
  minified file, a paragraph of Chinese, base64) still encodes exactly as before.
- Only where those characters are all of one kind (a run of thousands of letters, of spaces, of
  punctuation: a pre-token longer than the bound) is the cut made where the pattern would not
  split: still lossless (the ids decode back to the exact text), only the merges at that cut
  differ from an uncut encoding.
BPE training and shard encoding both go through `cut_long_runs`, so they always see the same pieces.

"Whitespace" is Unicode's White_Space set, which is what `\\s` means to the regex engines of
`tiktoken` and `tokenizers` (Python's own `\\s` also counts U+001C..U+001F).
"""

from __future__ import annotations

import functools
import re
import unicodedata

MAX_RUN_CHARS = 1024
SEARCH_CHARS = 256
WHITESPACE = "\t\n\v\f\r \x85\xa0\u1680\u2000-\u200a\u2028\u2029\u202f\u205f\u3000"


@functools.lru_cache(maxsize=8)
def _long_run(max_run: int) -> re.Pattern[str]:
    """A run of non-whitespace, or of whitespace, longer than `max_run`, matched from its start.

    The look-behinds make a match start only where a run starts, so the search stays linear.
    """
    longer = f"{{{max_run + 1},}}"
    return re.compile(f"(?<![^{WHITESPACE}])[^{WHITESPACE}]{longer}|(?<![{WHITESPACE}])[{WHITESPACE}]{longer}")


def _kind(char: str) -> str:
    """The GPT-2 pattern's classes inside a run: letter (L), number (N), anything else (O)."""
    kind = unicodedata.category(char)[0]
    return kind if kind in "LN" else "O"


def _splits_anyway(text: str, at: int) -> bool:
    """Whether the GPT-2 pattern ends a pre-token before `text[at]` (inside a run of non-whitespace)."""
    before = text[at - 1]
    return before != "'" and _kind(before) != _kind(text[at])


def _run_cuts(text: str, start: int, end: int, max_run: int) -> list[int]:
    """Where to cut the run text[start:end] so no piece of it is longer than `max_run`."""
    cuts: list[int] = []
    while end - start > max_run:
        bound = start + max_run
        lowest = max(start + 1, bound - SEARCH_CHARS)
        cut = next((at for at in range(bound, lowest - 1, -1) if _splits_anyway(text, at)), bound)
        cuts.append(cut)
        start = cut
    return cuts


def cut_long_runs(text: str, max_run: int = MAX_RUN_CHARS) -> list[str]:
    """`text` as pieces whose runs of (non-)whitespace are at most `max_run` characters; usually [text]."""
    if len(text) <= max_run:
        return [text]
    cuts = [cut for run in _long_run(max_run).finditer(text)
            for cut in _run_cuts(text, run.start(), run.end(), max_run)]
    if not cuts:
        return [text]
    bounds = [0, *cuts, len(text)]
    return [text[start:end] for start, end in zip(bounds, bounds[1:])]
