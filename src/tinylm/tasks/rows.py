"""Rows of a task's data file: a local JSONL file (offline), or `hf:NAME?config=C&split=S` with a network.

Each row comes with where it stands ("file.jsonl:7", "hf:NAME[3]"), so a malformed one is reported
by its place in one line. Local files are the default and need nothing; `hf:` only widens the
choice of data and goes through `datasets` (an optional heavy dependency, imported only then).
It lives with the tasks because file-based tasks (gsm8k) read it; evaluation's multiple-choice
files read it too.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from tinylm.errors import TinyLMError


def _hf_rows(source: str) -> Iterator[tuple[str, Any]]:
    name, _, query = source.removeprefix("hf:").partition("?")
    options = dict(item.partition("=")[::2] for item in query.split("&") if item)
    unknown = sorted(set(options) - {"config", "split"})
    if unknown:
        raise TinyLMError(f"{source}: unknown option(s) {', '.join(unknown)} (known: config, split)")
    try:
        import datasets

        rows = datasets.load_dataset(name, options.get("config"), split=options.get("split", "test"))
    except Exception as exc:  # noqa: BLE001 - offline, a missing dataset, a bad split: all one line
        raise TinyLMError(f"cannot load {source}: {str(exc).splitlines()[0] if str(exc) else type(exc).__name__}"
                          ) from None
    for index, row in enumerate(rows):
        yield f"{source}[{index}]", row


def read_rows(source: str) -> Iterator[tuple[str, Any]]:
    """(place, parsed row) for every non-blank row; a line that is not JSON is a TinyLMError at file:line."""
    if source.startswith("hf:"):
        yield from _hf_rows(source)
        return
    path = Path(source)
    try:
        lines = path.read_text(encoding="utf-8").splitlines()
    except (OSError, UnicodeDecodeError) as exc:
        raise TinyLMError(f"cannot read {path}: {getattr(exc, 'strerror', None) or exc}") from None
    for number, line in enumerate(lines, 1):
        if line.strip():
            try:
                yield f"{path}:{number}", json.loads(line)
            except json.JSONDecodeError as exc:
                raise TinyLMError(f"{path}:{number}: not JSON ({exc.msg})") from None
