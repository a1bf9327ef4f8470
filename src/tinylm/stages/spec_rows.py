"""The rows of a post-training data file, each with where it stands, and the one rule for a bad row.

SFT conversations (sft/data.py) and preference pairs (preference/data.py) are read the same way: a
JSONL file line by line, or `hf:NAME[:split]` through `datasets` (an optional heavy dependency,
imported only then), every row with its place ("FILE:LINE", "NAME[split]:INDEX"). Each stage's
parser turns a row into its own record or raises `RowError`; `collect_rows` then stops at the first
bad row with "FILE:LINE: reason" (`on_error="stop"`) or skips and counts it (`on_error="skip"`), so a
bad row is reported the same way whatever the stage.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Iterable, Iterator
from pathlib import Path
from typing import Any, TypeVar

from tinylm.errors import TinyLMError

T = TypeVar("T")
ON_ERROR = ("stop", "skip")
HF_PREFIX = "hf:"


class RowError(ValueError):
    """A row the stage cannot read; the message says why."""


def check_on_error(on_error: str) -> None:
    if on_error not in ON_ERROR:
        raise TinyLMError(f"on_error={on_error!r}: choose 'stop' or 'skip'")


def jsonl_rows(path: Path) -> Iterator[tuple[str, Any]]:
    """(FILE:LINE, parsed row) per non-blank line; a malformed line yields its RowError instead of a row."""
    if not path.is_file():
        raise TinyLMError(f"no such data file: {path}")
    with path.open(encoding="utf-8", errors="replace") as lines:
        for number, line in enumerate(lines, start=1):
            if not line.strip():
                continue
            try:
                yield f"{path}:{number}", json.loads(line)
            except json.JSONDecodeError as error:
                yield f"{path}:{number}", RowError(f"malformed JSON ({error.msg} at column {error.colno})")


def hf_rows(spec: str, split: str) -> Iterator[tuple[str, Any]]:
    """(NAME[split]:INDEX, row) of `hf:NAME[:split]` (`split` when the spec names none), None columns dropped."""
    name, _, hf_split = spec.removeprefix(HF_PREFIX).partition(":")
    hf_split = hf_split or split
    try:
        import datasets  # optional and heavy: only an hf: spec needs it

        rows = datasets.load_dataset(name, split=hf_split)
    except ImportError:
        raise TinyLMError(f"{spec}: reading hf: datasets needs `pip install tinylm[datasets]`") from None
    except Exception as error:  # offline, unknown name, unknown split: one line, never a traceback
        reason = str(error).strip().splitlines()[0] if str(error).strip() else type(error).__name__
        raise TinyLMError(f"{spec}: could not load {name!r} split {hf_split!r}: {reason}") from None
    for index, row in enumerate(rows):  # datasets gives a row None for columns only other rows have
        yield f"{name}[{hf_split}]:{index}", {key: value for key, value in row.items() if value is not None}


def file_rows(spec: str, split: str) -> Iterator[tuple[str, Any]]:
    """The rows of an `hf:` spec or of a JSONL file (which is its own split)."""
    return hf_rows(spec, split) if spec.startswith(HF_PREFIX) else jsonl_rows(Path(spec))


def collect_rows(rows: Iterable[tuple[str, Any]], parse: Callable[[Any], T], on_error: str,
                 limit: int | None) -> tuple[list[T], list[str]]:
    """(parsed rows, "FILE:LINE: reason" of each skipped one); with on_error="stop" the first bad row is an error."""
    parsed: list[T] = []
    skipped: list[str] = []
    for where, row in rows:
        if limit is not None and len(parsed) >= limit:
            break
        try:
            if isinstance(row, RowError):
                raise row
            parsed.append(parse(row))
        except RowError as error:
            if on_error == "stop":
                raise TinyLMError(f"{where}: {error} (--on-error skip skips such rows)") from None
            skipped.append(f"{where}: {error}")
    return parsed, skipped
