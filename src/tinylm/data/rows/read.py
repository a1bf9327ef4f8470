"""The rows of a data spec, each parsed by its caller, and the one rule for a bad row.

`read_rows` reads a local file by its suffix (`files.py`) or `hf:NAME[:CONFIG][:SPLIT]` through
`datasets` (`hf_dataset.py`), every row with its place ("FILE:LINE", "FILE[INDEX]", "FILE:row N",
"NAME[split]:INDEX"). The caller's parser turns a row into its own record (SFT messages, a preference
pair, a task's example) or raises `RowError`; then the first bad row stops the read with
"PLACE: reason" (`on_error="stop"`), or every bad row is skipped and counted (`on_error="skip"`),
so a bad row is reported the same way whatever reads it. What the file's bytes said comes back as
notes: a line on those that were not UTF-8, or a refusal when most were not (`undecodable.py`).
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Generic, TypeVar

from tinylm.data.rows.error import RowError
from tinylm.data.rows.files import local_rows
from tinylm.data.rows.hf_dataset import hf_rows
from tinylm.data.rows.hf_spec import is_hf_spec
from tinylm.data.rows.undecodable import Undecodable
from tinylm.errors import TinyLMError

T = TypeVar("T")
ON_ERROR = ("stop", "skip")
SKIP_HINT = " (--on-error skip skips such rows)"  # for the commands that offer --on-error


@dataclass
class RowsRead(Generic[T]):
    """The parsed rows of a spec, each skipped row as "PLACE: reason", and notes on the input (one line each)."""

    parsed: list[T]
    skipped: list[str] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)


def check_on_error(on_error: str) -> None:
    if on_error not in ON_ERROR:
        raise TinyLMError(f"on_error={on_error!r}: choose 'stop' or 'skip'")


def collect_rows(rows: Iterable[tuple[str, Any]], parse: Callable[[Any], T], on_error: str, limit: int | None,
                 hint: str = "") -> tuple[list[T], list[str]]:
    """(parsed rows, "PLACE: reason" of each skipped one); with on_error="stop" the first bad row is an error
    "PLACE: reason" followed by `hint`."""
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
                raise TinyLMError(f"{where}: {error}{hint}") from None
            skipped.append(f"{where}: {error}")
    return parsed, skipped


def read_rows(spec: str, parse: Callable[[Any], T], *, split: str = "train", on_error: str = "stop",
              limit: int | None = None, hint: str = "") -> RowsRead[T]:
    """The rows of an `hf:` spec (`split` when it names none) or a local file (its own split), parsed, at most
    `limit` of them; a file mostly not UTF-8 is refused."""
    check_on_error(on_error)
    if is_hf_spec(spec):
        return RowsRead(*collect_rows(hf_rows(spec, split), parse, on_error, limit, hint))
    text = Undecodable(Path(spec))
    try:
        read = RowsRead(*collect_rows(local_rows(Path(spec), text), parse, on_error, limit, hint))
    except TinyLMError:
        text.check()  # a file mostly not UTF-8 explains its bad row better than the row does
        raise
    text.check()
    read.notes += filter(None, [text.note()])
    return read


def no_rows(spec: str, what: str, skipped: list[str]) -> TinyLMError:
    """The error for a spec that gave no rows: `SPEC: no WHAT (N rows skipped, first: ...)`."""
    detail = f" ({len(skipped)} rows skipped, first: {skipped[0]})" if skipped else ""
    return TinyLMError(f"{spec}: no {what}{detail}")
