"""The rows of a post-training data spec, each with where it stands, and the one rule for a bad row.

SFT conversations (sft/data.py) and preference pairs (preference/data.py) are read the same way: a
local file by its suffix (JSONL line by line, a JSON array, CSV with a header: `row_files.py`), or
`hf:NAME[:split]` through `datasets` (an optional heavy dependency, imported only then), every row
with its place ("FILE:LINE", "FILE[INDEX]", "FILE:row N", "NAME[split]:INDEX"). Each stage's parser
turns a row into its own record or raises `RowError`; `collect_rows` then stops at the first bad
row with "PLACE: reason" (`on_error="stop"`) or skips and counts it (`on_error="skip"`), so a bad
row is reported the same way whatever the stage. `read_rows` does both and adds what the file's
bytes said: a note on those that were not UTF-8, or a refusal when most were not (`undecodable.py`).
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Generic, TypeVar

from tinylm.errors import TinyLMError
from tinylm.stages.row_error import RowError
from tinylm.stages.row_files import local_rows
from tinylm.stages.undecodable import Undecodable

T = TypeVar("T")
ON_ERROR = ("stop", "skip")
HF_PREFIX = "hf:"
# RowError is re-exported: the parsers raise it and import it from here
__all__ = ["ON_ERROR", "RowError", "RowsRead", "check_on_error", "collect_rows", "hf_rows", "read_rows"]


@dataclass
class RowsRead(Generic[T]):
    """The parsed rows of a spec, each skipped row as "PLACE: reason", and notes on the input (one line each)."""

    parsed: list[T]
    skipped: list[str] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)


def check_on_error(on_error: str) -> None:
    if on_error not in ON_ERROR:
        raise TinyLMError(f"on_error={on_error!r}: choose 'stop' or 'skip'")


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


def collect_rows(rows: Iterable[tuple[str, Any]], parse: Callable[[Any], T], on_error: str,
                 limit: int | None) -> tuple[list[T], list[str]]:
    """(parsed rows, "PLACE: reason" of each skipped one); with on_error="stop" the first bad row is an error."""
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


def read_rows(spec: str, split: str, parse: Callable[[Any], T], on_error: str, limit: int | None) -> RowsRead[T]:
    """The rows of an `hf:` spec or a local file (its own split), parsed; refused when mostly not UTF-8."""
    if spec.startswith(HF_PREFIX):
        return RowsRead(*collect_rows(hf_rows(spec, split), parse, on_error, limit))
    text = Undecodable(Path(spec))
    try:
        read = RowsRead(*collect_rows(local_rows(Path(spec), text), parse, on_error, limit))
    except TinyLMError:
        text.check()  # a file mostly not UTF-8 explains its bad row better than the row does
        raise
    text.check()
    read.notes += filter(None, [text.note()])
    return read


def nothing_to_train(spec: str, what: str, skipped: list[str]) -> TinyLMError:
    """The error for a spec that gave no rows: `SPEC: no WHAT to train on (N rows skipped, first: ...)`."""
    detail = f" ({len(skipped)} rows skipped, first: {skipped[0]})" if skipped else ""
    return TinyLMError(f"{spec}: no {what} to train on{detail}")
