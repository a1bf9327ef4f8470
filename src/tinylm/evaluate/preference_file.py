"""Preference pairs from a file of the user's own, for `tinylm eval --tasks prefs:FILE`.

    {"prompt": "2+2?", "chosen": "4", "rejected": "5"}                                       text
    {"prompt": [messages ending with the user's], "chosen": [..., assistant], "rejected": [...]}  message lists

A JSONL, JSON or CSV file (or `hf:NAME[:CONFIG][:SPLIT]`, split test unless named) read by the one row
reader (`data/rows/`), so a bad row stops the read as "FILE:LINE: reason" and a missing file is one
line too. A side given as a message list is its last message, which must be the assistant's (trl's
conversational layout); every row is scored, in file order, up to --examples.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from tinylm.data.rows.error import RowError
from tinylm.data.rows.hf_spec import is_hf_spec
from tinylm.data.rows.read import no_rows, read_rows
from tinylm.errors import TinyLMError
from tinylm.tasks.preference_pairs import PreferencePair
from tinylm.tasks.task import Example

PROMPT_ROLES = ("system", "user", "assistant")


def _message(value: Any) -> dict[str, str] | None:
    """A {role, content} message as plain text, or None when `value` is not one."""
    if isinstance(value, dict) and value.get("role") in PROMPT_ROLES and isinstance(value.get("content"), str):
        return {"role": value["role"], "content": value["content"]}
    return None


def _prompt(value: Any) -> list[dict[str, str]]:
    if isinstance(value, str) and value.strip():
        return [{"role": "user", "content": value}]
    given = value if isinstance(value, list) else []
    messages = [m for m in map(_message, given) if m is not None]
    if not messages or len(messages) != len(given) or messages[-1]["role"] != "user":
        raise RowError("'prompt' must be a text or a list of {role, content} messages ending with the user's")
    if any(m["role"] == "system" for m in messages[1:]):
        raise RowError("'prompt': a system message may only come first")
    return messages


def _answer(value: Any, name: str) -> str:
    if isinstance(value, list) and value and (last := _message(value[-1])) and last["role"] == "assistant":
        value = last["content"]
    if not isinstance(value, str) or not value.strip():
        raise RowError(f"'{name}' must be a non-empty text (or messages ending with the assistant's answer)")
    return value


def preference_row(row: Any) -> PreferencePair:
    """One row as a pair to score; RowError says what is wrong with it."""
    if not isinstance(row, dict) or not {"prompt", "chosen", "rejected"} <= row.keys():
        keys = sorted(row) if isinstance(row, dict) else type(row).__name__
        raise RowError(f"a preference pair needs prompt, chosen and rejected (got {keys})")
    prompt = _prompt(row["prompt"])
    chosen, rejected = _answer(row["chosen"], "chosen"), _answer(row["rejected"], "rejected")
    if chosen == rejected:
        raise RowError("chosen and rejected are identical: the pair prefers nothing")
    example = Example("file", (*prompt, {"role": "assistant", "content": chosen}), chosen)
    return PreferencePair(example, chosen, rejected, "file")


def load_preference_file(spec: str) -> list[PreferencePair]:
    """Every pair of a file (or hf: dataset); TinyLMError naming the file (and line) when one cannot be read."""
    if not is_hf_spec(spec) and not Path(spec).exists():  # most likely a task's name without its builtin:
        raise TinyLMError(f"preference file not found: {spec} (a built-in task's pairs are prefs:builtin:NAME)")
    pairs = read_rows(spec, preference_row, split="test").parsed
    if not pairs:
        raise no_rows(spec, "preference pairs to score", [])
    return pairs
