"""Preference data from a spec: pairs (prompt, chosen answer, rejected answer) or unpaired labelled answers.

A file is JSONL, one JSON array (`.json`) or CSV/TSV with a header, read by the one row reader
(`data/rows/`), and may mix these layouts, detected row by row:

    {"prompt": "2+2?", "chosen": "4", "rejected": "5"}                                   text (and CSV)
    {"prompt": [messages], "chosen": [assistant message], "rejected": [...]}             message lists (trl)
    {"prompt": "...", "chosen": [user, assistant], "rejected": [user, assistant]}        UltraFeedback-binarized
    {"chosen": [user, assistant], "rejected": [user, assistant]}                         implicit prompt (trl)
    {"chosen": "\\n\\nHuman: ... \\n\\nAssistant: ...", "rejected": "..."}                    HH-RLHF transcripts
    {"prompt": "...", "completion": "...", "label": true}                                 unpaired (KTO)

In every layout the answer is the last assistant message and everything before it is the prompt,
which both sides must share (UltraFeedback, the implicit prompt and HH-RLHF repeat it inside each
side; it is split off here). A CSV label is the text true or false. A pair whose chosen or rejected
answer is empty, or whose two answers are identical, teaches nothing and is refused like any
malformed row: "PLACE: reason" (`on_error="stop"`) or skipped and counted (`on_error="skip"`).
Bytes that are not UTF-8 are noted (`notes`), or refused when most are. `builtin:TASK` generates
verified pairs (tasks/preference_pairs.py), `hf:NAME[:CONFIG][:SPLIT]` reads through `datasets` with
the same row mapping.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from typing import Any

from tinylm.data.rows.error import RowError
from tinylm.data.rows.read import SKIP_HINT, check_on_error, no_rows, read_rows
from tinylm.stages.messages import Message, checked_messages
from tinylm.tasks.preference_pairs import preference_pairs
from tinylm.tasks.registry import PREFIX as BUILTIN_PREFIX

BUILTIN_DEFAULT_PAIRS = 2_000
_HH_TURN = re.compile(r"\n\n(Human|Assistant): ")


@dataclass(frozen=True)
class PreferenceRow:
    """A prompt (messages ending with a user turn) and its answers; one side is None in an unpaired row."""

    prompt: tuple[Message, ...]
    chosen: str | None
    rejected: str | None

    @property
    def paired(self) -> bool:
        return self.chosen is not None and self.rejected is not None


@dataclass
class PreferenceData:
    spec: str
    rows: list[PreferenceRow]
    skipped: list[str] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)  # on the input, one line each (bytes that were not UTF-8)

    def __len__(self) -> int:
        return len(self.rows)

    @property
    def unpaired(self) -> int:
        return sum(not row.paired for row in self.rows)


def _prompt_messages(prompt: Any) -> list[Message]:
    if isinstance(prompt, str):
        return [{"role": "user", "content": prompt}]
    if isinstance(prompt, list) and prompt:  # checked as every message list is (which wants an assistant turn)
        return checked_messages([*prompt, {"role": "assistant", "content": ""}])[:-1]
    raise RowError("'prompt' must be a string or a non-empty list of messages")


def _split_side(side: Any, name: str) -> tuple[list[Message], str]:
    """(the messages before the answer, the answer) of one side given as text or as a message list."""
    if isinstance(side, str):
        return [], side
    if not isinstance(side, list) or not side:
        raise RowError(f"'{name}' must be a string or a non-empty list of messages")
    messages = checked_messages(side)
    if messages[-1]["role"] != "assistant":
        raise RowError(f"'{name}' must end with an assistant message")
    return messages[:-1], messages[-1]["content"]


def _hh_transcript(text: Any, name: str) -> tuple[list[Message], str]:
    """An HH-RLHF side ("\\n\\nHuman: ...\\n\\nAssistant: ...") as (prompt messages, final answer)."""
    if not isinstance(text, str):
        raise RowError(f"'{name}' must be an HH-RLHF transcript string")
    parts = _HH_TURN.split(text)
    if len(parts) < 5 or parts[0].strip() or parts[-2] != "Assistant":
        raise RowError(f"'{name}' is not an HH-RLHF transcript (\\n\\nHuman: ... \\n\\nAssistant: ...)")
    roles = {"Human": "user", "Assistant": "assistant"}
    messages = [{"role": roles[who], "content": said} for who, said in zip(parts[1::2], parts[2::2])]
    return messages[:-1], messages[-1]["content"]


def _label(label: Any) -> bool:
    """A KTO label: true or false, in JSON or as CSV text."""
    if isinstance(label, str) and label.strip().lower() in ("true", "false"):
        return label.strip().lower() == "true"
    if not isinstance(label, bool):
        raise RowError("'label' must be true (desirable) or false (undesirable)")
    return label


def _sides(row: dict[str, Any]) -> tuple[tuple[list[Message], str], tuple[list[Message], str]]:
    """(messages before the answer, the answer) of chosen and of rejected, whichever way the sides are given."""
    names = ("chosen", "rejected")
    if "prompt" in row:
        return _split_side(row["chosen"], "chosen"), _split_side(row["rejected"], "rejected")
    if all(isinstance(row[name], str) for name in names):  # HH-RLHF: each side is the whole transcript
        return _hh_transcript(row["chosen"], "chosen"), _hh_transcript(row["rejected"], "rejected")
    if all(isinstance(row[name], list) for name in names):  # trl's implicit prompt: the shared prefix
        return _split_side(row["chosen"], "chosen"), _split_side(row["rejected"], "rejected")
    raise RowError("without a 'prompt', chosen and rejected must be both message lists or both HH-RLHF transcripts")


def _answer(text: str, name: str) -> str:
    if not text.strip():
        raise RowError(f"the {name} answer is empty")
    return text


def row_from_json(row: Any) -> PreferenceRow:
    """One JSON row in any layout above as a checked PreferenceRow; RowError says what is wrong."""
    if not isinstance(row, dict):
        raise RowError(f"expected a JSON object, got {type(row).__name__}")
    if "completion" in row and "label" in row:
        label = _label(row["label"])
        if not isinstance(row["completion"], str):
            raise RowError("'completion' must be a string")
        answer = _answer(row["completion"], "completion")
        prompt = _prompt_messages(row.get("prompt"))
        return PreferenceRow(tuple(prompt), answer if label else None, None if label else answer)
    if "chosen" not in row or "rejected" not in row:
        raise RowError(f"unknown row shape with keys {sorted(row)} (expected prompt/chosen/rejected, "
                       "chosen/rejected transcripts, or prompt/completion/label)")
    (before_w, chosen), (before_l, rejected) = _sides(row)
    if before_w != before_l:
        raise RowError("chosen and rejected do not share the same prompt messages")
    if "prompt" not in row and not before_w:
        raise RowError("no prompt: without a 'prompt' key, chosen and rejected must start with the prompt messages")
    prompt = before_w if "prompt" not in row else _prompt_messages(row["prompt"])
    if before_w and "prompt" in row and before_w != prompt:  # UltraFeedback repeats the prompt in each side
        if before_w[-len(prompt):] != prompt:
            raise RowError("the messages inside chosen do not end with the prompt")
        prompt = before_w
    if not prompt or prompt[-1]["role"] != "user":
        raise RowError("the prompt must end with a user message")
    chosen, rejected = _answer(chosen, "chosen"), _answer(rejected, "rejected")
    if chosen == rejected:
        raise RowError("chosen and rejected are identical: the pair prefers nothing")
    return PreferenceRow(tuple(prompt), chosen, rejected)


def load_preferences(spec: str, split: str = "train", *, seed: int = 0, limit: int | None = None,
                     on_error: str = "stop") -> PreferenceData:
    """The preference rows a data spec names (`split` picks a builtin task's split or the default hf: split)."""
    check_on_error(on_error)
    if spec.startswith(BUILTIN_PREFIX):
        pairs = preference_pairs(spec, split, limit or BUILTIN_DEFAULT_PAIRS, seed)
        loaded = PreferenceData(spec, [PreferenceRow(tuple(p.example.prompt), p.chosen, p.rejected) for p in pairs])
    else:
        read = read_rows(spec, row_from_json, split=split, on_error=on_error, limit=limit, hint=SKIP_HINT)
        loaded = PreferenceData(spec, read.parsed, read.skipped, read.notes)
    if not loaded.rows:
        raise no_rows(spec, "preference pairs to train on", loaded.skipped)
    return loaded
