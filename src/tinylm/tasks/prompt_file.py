"""The user's own prompts as a task: a JSONL file of {"prompt", "answer"} rows, verified by exact match.

    {"prompt": "What is the capital of France?", "answer": "Paris"}

`tinylm rl --task data/prompts.jsonl` (or `prompts:FILE`, the form `tinylm eval --tasks` reads too)
trains and scores on these rows. A response is right when it equals
the answer up to whitespace; a `--reward` of the user's own gets the whole example, so it can judge
more loosely. A number as the answer is taken as its text ("answer": 42 is "42").

Like every built-in task, a stable hash of the prompt holds out about a tenth of the rows for
evaluation, whatever the seed. The file is read by the one row reader (`data/rows/`), so it may
also be a JSON array, a CSV file with prompt and answer columns, or `hf:NAME[:CONFIG][:SPLIT]` (split
`test` unless named); a row that is not an object with a non-empty string prompt and an answer is an
error at its FILE:LINE.
"""

from __future__ import annotations

import random
from typing import Any

from tinylm.data.rows.error import RowError
from tinylm.data.rows.read import no_rows, read_rows
from tinylm.errors import TinyLMError
from tinylm.tasks.task import Example, Task, check_split, conversation, split_of


def _text(value: Any) -> str | None:
    """The row value as text: a string, or a number written out; None for anything else."""
    if isinstance(value, str):
        return value
    if isinstance(value, int | float) and not isinstance(value, bool):
        return str(value)
    return None


def normalized(text: str) -> str:
    return " ".join(text.split())


def prompt_example(row: Any) -> Example:
    """One {"prompt", "answer"} row as an example; RowError says what is wrong with it."""
    if not isinstance(row, dict) or "prompt" not in row or "answer" not in row:
        raise RowError("not a prompt row: it needs \"prompt\" and \"answer\" (got "
                       f"{sorted(row) if isinstance(row, dict) else type(row).__name__})")
    prompt, answer = row["prompt"], _text(row["answer"])
    if not isinstance(prompt, str) or not prompt.strip():
        raise RowError(f"\"prompt\" must be non-empty text, got {prompt!r}")
    if answer is None or not answer.strip():
        raise RowError(f"\"answer\" must be non-empty text or a number, got {row['answer']!r}")
    return conversation(prompt, prompt, answer)


class PromptFileTask(Task):
    name = "prompts"

    def __init__(self, file: str) -> None:
        if not file:
            raise TinyLMError("prompts: name the file: prompts:FILE (a JSONL file of {\"prompt\", \"answer\"} rows)")
        self.source = file
        read = read_rows(file, prompt_example, split="test")
        if not read.parsed:
            raise no_rows(file, "prompt rows", read.skipped)
        self.rows, self.notes = read.parsed, tuple(read.notes)

    def examples(self, split: str, n: int, seed: int = 0) -> list[Example]:
        split = check_split(split)
        pool = [e for e in self.rows if split_of(e.key) == split]
        if split == "train" and not pool:
            raise TinyLMError(f"{self.source}: none of its {len(self.rows)} row(s) is a training prompt (a tenth of "
                              "the rows, chosen by a hash of the prompt, is held out): add rows")
        random.Random(f"prompts:{split}:{seed}").shuffle(pool)
        return pool[:n]

    def verify(self, response: str, example: Example) -> bool:
        return normalized(response) == normalized(example.answer)
