"""The bytes of a data file that are not UTF-8: counted, placed, and refused past prepare's threshold.

A Latin-1 "é" in a UTF-8 file cannot be decoded; it becomes U+FFFD, the replacement character, as
`tinylm prepare` does with a corpus (`data/text.py`). Done without a word, a model would be fine-tuned
on "caf\ufffd"; so the first such line and the count are one note (`RowsRead.notes`), and a file whose
text is more than `MAX_REPLACEMENT_SHARE` U+FFFD (prepare's threshold, not a copy: another encoding
altogether) is refused with its first such line.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from tinylm.data.corpus import REPLACEMENT
from tinylm.data.corpus_report import MAX_REPLACEMENT_SHARE
from tinylm.data.text import BOM
from tinylm.errors import TinyLMError

REPLACEMENT_BYTES = REPLACEMENT.encode("utf-8")  # a U+FFFD the file itself holds is text, not a replacement


def _plural(n: int, noun: str) -> str:
    return f"{n:,} {noun}" if n == 1 else f"{n:,} {noun}s"


@dataclass
class Undecodable:
    """The U+FFFD that one file's lines became so far; `line` decodes a line and counts."""

    path: Path
    characters: int = 0
    replacements: int = 0
    lines: int = 0  # lines that held any
    first: int | None = None  # the number of the first of them

    def line(self, raw: bytes, number: int) -> str:
        """Line `number` as text: UTF-8, undecodable bytes as U+FFFD (counted), a leading BOM dropped."""
        if number == 1 and raw.startswith(BOM):
            raw = raw[len(BOM):]
        try:
            text = raw.decode("utf-8")
        except UnicodeDecodeError:
            text = raw.decode("utf-8", errors="replace")
            self.replacements += text.count(REPLACEMENT) - raw.count(REPLACEMENT_BYTES)
            self.lines += 1
            self.first = self.first or number
        self.characters += len(text)
        return text

    def whole(self, raw: bytes) -> str:
        """A whole file's bytes as text, line by line (so the first replacement has a line number)."""
        return "".join(self.line(line, number) for number, line in enumerate(raw.splitlines(keepends=True), 1))

    @property
    def share(self) -> float:
        return self.replacements / self.characters if self.characters else 0.0

    def check(self) -> None:
        """TinyLMError "FILE:LINE: mostly not UTF-8" when the share of U+FFFD is past prepare's threshold."""
        if self.share > MAX_REPLACEMENT_SHARE:
            raise TinyLMError(f"{self.path}:{self.first}: mostly not UTF-8: {self.share:.0%} of its characters "
                              f"({self.replacements:,} of {self.characters:,}) are U+FFFD replacements for "
                              "undecodable bytes, the first on this line; convert the file to UTF-8 "
                              "(e.g. iconv -f latin1 -t utf-8)")

    def note(self) -> str | None:
        """One line naming the first line with undecodable bytes and the count, or None when there were none."""
        if not self.lines:
            return None
        are, them = ("is", "it") if self.replacements == 1 else ("are", "them")
        return (f"{self.path}:{self.first}: {_plural(self.replacements, 'character')} on "
                f"{_plural(self.lines, 'line')} {are} not UTF-8 and became U+FFFD (the first on this line); "
                f"convert the file to UTF-8 to keep {them}")
