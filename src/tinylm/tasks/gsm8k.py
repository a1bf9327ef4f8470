"""Grade-school maths in the GSM8K layout from a local JSONL file: {"question", "answer"}, answer after ####.

    {"question": "Tom has 3 apples and buys 4 more. How many?", "answer": "3 + 4 = 7\\n#### 7"}

The reference is the number after `####` (commas removed). A reply is right when the number it gives,
after its own `####` if it writes one or else its last number, equals the reference as a decimal
(so "7", "7.0" and "#### 7 apples" pass). The file is the held-out set: every row is asked (a local
file offline, or `hf:openai/gsm8k?config=main` with a network).
"""

from __future__ import annotations

import re
from decimal import Decimal, InvalidOperation

from tinylm.errors import TinyLMError
from tinylm.tasks.task import Example, Task, check_split, conversation

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


class GSM8KTask(Task):
    name = "gsm8k"

    def __init__(self, source: str) -> None:
        self.source = source
        self.rows = self._read()

    def _read(self) -> list[Example]:
        from tinylm.evaluate.rows import read_rows

        rows = []
        for place, row in read_rows(self.source):
            try:
                question, answer = row["question"], row["answer"]
                if not isinstance(question, str) or not isinstance(answer, str) or "####" not in answer:
                    raise ValueError("question and answer must be strings, the answer ending in '#### NUMBER'")
                if final_number(answer) is None:
                    raise ValueError("no number after '####'")
            except (KeyError, TypeError, ValueError) as exc:
                what = f"missing field {exc}" if isinstance(exc, KeyError) else str(exc)
                raise TinyLMError(f"{place}: not a valid gsm8k row ({what})") from None
            rows.append(conversation(place, question, answer))
        if not rows:
            raise TinyLMError(f"{self.source}: no gsm8k rows")
        return rows

    def examples(self, split: str, n: int, seed: int = 0) -> list[Example]:
        check_split(split)
        return self.rows[:n]

    def verify(self, response: str, example: Example) -> bool:
        got = final_number(response)
        return got is not None and got == final_number(example.answer)
