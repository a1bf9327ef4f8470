"""How bytes from a file become document text: the one rule for undecodable input.

- A file with a NUL byte is binary (or UTF-16/32 text): refused with one line naming it, since
  tokenizing it would teach the model noise. Real UTF-8 text never contains NUL.
- Text is UTF-8. A leading byte-order mark is dropped (it is file metadata, not text).
- Bytes that are not valid UTF-8 (a Latin-1 word in an otherwise UTF-8 file, a truncated
  character) each become U+FFFD, the Unicode replacement character; the rest of the file is kept,
  the document is counted (`ReadStats`), and prepare says so on the console (`corpus_report.py`).
- Line endings are kept as they are, so "\\r\\n" survives into the tokens.
- Strings that arrive already decoded (JSON, Parquet, datasets) get the same treatment for lone
  surrogates, which UTF-8 cannot store.
"""

from __future__ import annotations

from pathlib import Path

from tinylm.errors import TinyLMError
from tinylm.tokenizer.tokenizer import valid_unicode

BOM = b"\xef\xbb\xbf"


def decode_text(data: bytes, where: str | Path) -> tuple[str, bool]:
    """(text, whether any byte had to be replaced) for file contents `data`, by the rule above."""
    if b"\x00" in data:
        raise TinyLMError(f"{where} looks like a binary file (it contains NUL bytes); "
                          "tinylm reads UTF-8 text")
    if data.startswith(BOM):
        data = data[len(BOM):]
    try:
        return data.decode("utf-8"), False
    except UnicodeDecodeError:
        return data.decode("utf-8", errors="replace"), True


def read_text_file(path: Path) -> tuple[str, bool]:
    """A whole file as one document, by the rule above."""
    try:
        data = path.read_bytes()
    except OSError as exc:
        raise TinyLMError(f"cannot read {path}: {exc.strerror or exc}") from None
    return decode_text(data, path)


def clean_string(text: str) -> tuple[str, bool]:
    """An already decoded string made storable as UTF-8: (text, whether anything was replaced)."""
    fixed = valid_unicode(text)
    return fixed, fixed is not text
