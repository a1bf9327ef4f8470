"""The rows of a local data file, by its suffix: JSONL, a JSON array, or CSV/TSV with a header.

    data.jsonl   one JSON object per line                      rows named FILE:LINE
    data.json    one array of objects (alpaca_data.json)       rows named FILE[INDEX]
                 (or one object per line, read as JSONL)
    data.csv     a header row, then one row per line           rows named FILE:row N (the header is row 1)
    data.tsv     the same, separated by tabs

Any other suffix is read as JSONL. A CSV row becomes the object {column: cell} (cells are text; a
short row lacks its last columns, a column with an empty name, like a pandas index, is dropped), so
its columns are the JSONL keys: instruction/input/output, prompt/response, prompt/chosen/rejected.
Every reader decodes through `Undecodable`, so bytes that are not UTF-8 are counted whatever the
layout. A row that cannot be read is yielded as its RowError (the collector reports or skips it); a
file that cannot be read at all (missing, unreadable, a broken JSON array) is a TinyLMError naming it.
"""

from __future__ import annotations

import csv
import io
import json
from collections.abc import Iterable, Iterator
from pathlib import Path
from typing import Any, BinaryIO

from tinylm.data.rows.error import RowError
from tinylm.data.rows.undecodable import Undecodable
from tinylm.errors import TinyLMError

CSV_DELIMITERS = {".csv": ",", ".tsv": "\t"}


def _cannot_read(path: Path, error: OSError) -> TinyLMError:
    return TinyLMError(f"cannot read {path}: {error.strerror or error}")


def _open(path: Path) -> BinaryIO:
    try:
        return path.open("rb")
    except OSError as error:
        raise _cannot_read(path, error) from None


def _read_bytes(path: Path) -> bytes:
    try:
        return path.read_bytes()
    except OSError as error:
        raise _cannot_read(path, error) from None


def _json_lines(path: Path, lines: Iterable[tuple[int, str]]) -> Iterator[tuple[str, Any]]:
    for number, line in lines:
        if not line.strip():
            continue
        try:
            yield f"{path}:{number}", json.loads(line)
        except json.JSONDecodeError as error:
            yield f"{path}:{number}", RowError(f"malformed JSON ({error.msg} at column {error.colno})")


def jsonl_rows(path: Path, text: Undecodable) -> Iterator[tuple[str, Any]]:
    """(FILE:LINE, parsed row) per non-blank line, read as it goes; a malformed line yields its RowError."""
    with _open(path) as raw:
        yield from _json_lines(path, ((n, text.line(line, n)) for n, line in enumerate(raw, start=1)))


def json_rows(path: Path, text: Undecodable) -> Iterator[tuple[str, Any]]:
    """(FILE[INDEX], row) of a file holding one JSON array; a file of one object per line is read as JSONL."""
    decoded = text.whole(_read_bytes(path))
    try:
        data = json.loads(decoded)
    except json.JSONDecodeError as error:
        if error.msg != "Extra data" or not decoded.lstrip().startswith("{"):  # else one object, then more: JSONL
            raise TinyLMError(f"{path}:{error.lineno}: malformed JSON ({error.msg} at column {error.colno})") from None
        yield from _json_lines(path, enumerate(decoded.split("\n"), start=1))
        return
    if not isinstance(data, list):
        raise TinyLMError(f"{path}: expected a JSON array of rows ([{{...}}, ...]) or one row per line, "
                          f"got one {type(data).__name__}")
    for index, row in enumerate(data):
        yield f"{path}[{index}]", row


def csv_rows(path: Path, text: Undecodable) -> Iterator[tuple[str, Any]]:
    """(FILE:row N, {column: cell}) per non-blank row after the header; a row with too many cells is a RowError."""
    reader = csv.reader(io.StringIO(text.whole(_read_bytes(path)), newline=""),
                        delimiter=CSV_DELIMITERS[path.suffix.lower()])
    number = 0  # the header is row 1
    try:
        header = [name.strip() for name in next(reader, [])]
        if len(set(filter(None, header))) < len(list(filter(None, header))):
            raise TinyLMError(f"{path}:row 1: the header names a column twice ({', '.join(header)})")
        for number, cells in enumerate(reader, start=2):
            if not any(cell.strip() for cell in cells):
                continue
            if len(cells) > len(header):
                yield f"{path}:row {number}", RowError(f"{len(cells)} cells but the header names {len(header)} "
                                                       "columns")
                continue
            yield f"{path}:row {number}", {name: cell for name, cell in zip(header, cells) if name}
    except csv.Error as error:
        raise TinyLMError(f"{path}:row {number + 1}: malformed CSV ({error})") from None


def local_rows(path: Path, text: Undecodable) -> Iterator[tuple[str, Any]]:
    """The rows of a local file, read by its suffix (JSONL unless .json, .csv or .tsv)."""
    if not path.is_file():
        raise TinyLMError(f"no such data file: {path}")
    suffix = path.suffix.lower()
    if suffix == ".json":
        return json_rows(path, text)
    if suffix in CSV_DELIMITERS:
        return csv_rows(path, text)
    return jsonl_rows(path, text)
