"""Grade-school maths in the GSM8K layout from a local JSONL file: {"question", "answer"}, answer after ####.

    {"question": "Tom has 3 apples and buys 4 more. How many?", "answer": "3 + 4 = 7\\n#### 7"}

The reference is the number after `####` (commas removed). A reply is right when the number it gives,
after its own `####` if it writes one or else its last number, equals the reference as a decimal
(so "7", "7.0" and "#### 7 apples" pass). The source is a local file offline (read by the one row
reader, `data/rows/`), or `hf:openai/gsm8k:main` (split `test` unless named) with a network. A
problem's key is its question.

Which rows are held out is `holdout`:

- "all" (`gsm8k:FILE`, what `tinylm eval` has always read): the file is a held-out set, every row
  a test problem, asked in file order; it has no train split.
- "share" (`builtin:gsm8k?file=FILE`, for training): like every built-in task, the hash of the
  question holds out about a tenth of the rows, and the rest are the train split.

Its wrong answers keep the worked solution and put a final number off by one either way.
"""

from __future__ import annotations

import random
import re
from decimal import Decimal, InvalidOperation
from typing import Any

from tinylm.data.rows.error import RowError
from tinylm.data.rows.read import no_rows, read_rows
from tinylm.errors import TinyLMError
from tinylm.tasks.task import Example, Task, check_split, conversation, split_of

HOLDOUTS = ("all", "share")
_NUMBER = re.compile(r"-?\d+(?:\.\d+)?")
_SEPARATOR = re.compile(r"(?<=\d),(?=\d)")


def final_number(text: str) -> Decimal | None:
    """The number after the last `####`, or else the last number in `text`."""
    tail = text.rsplit("####", 1)[-1] if "####" in text else text
    found = _NUMBER.findall(_SEPARATOR.sub("", tail))
    if not found:
        return None
    try:
        return Decimal(found[0] if "####" in text else found[-1])
    except InvalidOperation:
        return None


def gsm8k_example(row: Any) -> Example:
    """One {"question", "answer"} row as an example; RowError says what is wrong with it."""
    try:
        question, answer = row["question"], row["answer"]
        if not isinstance(question, str) or not isinstance(answer, str) or "####" not in answer:
            raise ValueError("question and answer must be strings, the answer ending in '#### NUMBER'")
        if final_number(answer) is None:
            raise ValueError("no number after '####'")
    except (KeyError, TypeError, ValueError) as exc:
        what = f"missing field {exc}" if isinstance(exc, KeyError) else str(exc)
        raise RowError(f"not a valid gsm8k row ({what})") from None
    return conversation(question, question, answer)


class GSM8KTask(Task):
    name = "gsm8k"

    def __init__(self, file: str, holdout: str = "all") -> None:
        if not file:
            raise TinyLMError("gsm8k: name its rows: gsm8k:FILE or builtin:gsm8k?file=FILE (a JSONL file or hf:NAME)")
        if holdout not in HOLDOUTS:
            raise TinyLMError(f"gsm8k: holdout={holdout!r}: choose 'all' (every row is a test problem) or 'share'")
        self.source, self.holdout = file, holdout
        read = read_rows(file, gsm8k_example, split="test")
        if not read.parsed:
            raise no_rows(file, "gsm8k rows", read.skipped)
        self.rows, self.notes = read.parsed, tuple(read.notes)

    def examples(self, split: str, n: int, seed: int = 0) -> list[Example]:
        split = check_split(split)
        if self.holdout == "all":
            if split == "train":
                raise TinyLMError(f"gsm8k:{self.source} is a held-out set with no train split: to train on it, "
                                  f"use builtin:gsm8k?file={self.source} (a tenth held out)")
            return self.rows[:n]
        pool = [e for e in self.rows if split_of(e.key) == split]
        random.Random(f"gsm8k:{split}:{seed}").shuffle(pool)
        return pool[:n]

    def verify(self, response: str, example: Example) -> bool:
        got = final_number(response)
        return got is not None and got == final_number(example.answer)

    def wrong_answers(self, example: Example) -> dict[str, str]:
        work, right = example.answer.rsplit("####", 1)[0], final_number(example.answer)
        assert right is not None  # every row is checked for its number when read
        return {"off_by_one": f"{work}#### {right + 1}", "off_by_minus_one": f"{work}#### {right - 1}"}
