"""builtin:addition: long addition, with the written-out steps as the assistant's reasoning segment.

    user:      What is 4821 + 3967?
    assistant: <|think|>1+7=8 c0
               2+6+0=8 c0
               8+9+0=17 c1
               4+3+1=8 c1<|/think|>8788

Each step adds one column, right to left, with the carry in, and writes the column's sum and the
carry out: what a person writes on paper. The answer is then the steps' last digits read back from
the top, with the final carry in front. `reasoning=0` gives the same problems answered directly, so
the same model and budget trained on both shows what the scratchpad is worth (docs/tools.md).
Operands have exactly `digits` digits; `verify` reads the last integer of the final answer. The
working is longer than the default answer budget of evaluation (32 new tokens), so the task declares
`reply_tokens` and evaluation never cuts a reply shorter than that.
"""

from __future__ import annotations

import random

from tinylm.errors import TinyLMError
from tinylm.tasks.arith import parse_integer
from tinylm.tasks.task import Example, Task, check_split, split_of


def steps(a: int, b: int, digits: int) -> str:
    """The column-by-column working of a + b, least significant column first, one line per column."""
    lines, carry = [], 0
    for column in range(digits):
        x, y = a // 10**column % 10, b // 10**column % 10
        total = x + y + carry
        lines.append(f"{x}+{y}" + (f"+{carry}" if column else "") + f"={total} c{total // 10}")
        carry = total // 10
    return "\n".join(lines)


class AdditionTask(Task):
    name = "addition"

    def __init__(self, digits: int = 4, reasoning: int = 1) -> None:
        if not 1 <= digits <= 12:
            raise TinyLMError(f"builtin:addition: digits={digits} must be between 1 and 12")
        if reasoning not in (0, 1):
            raise TinyLMError(f"builtin:addition: reasoning={reasoning} must be 0 or 1")
        self.digits, self.reasoning = digits, bool(reasoning)
        # A byte-level tokenizer spends at most one token per byte: each working line is at most
        # "9+9+1=19 c1\n" (12 bytes); the answer is digits + 1; the think markers and end are 3 more.
        self.reply_tokens = (12 * digits if reasoning else 0) + digits + 4

    def _example(self, a: int, b: int) -> Example:
        answer = str(a + b)
        reply = {"role": "assistant", "content": answer}
        if self.reasoning:
            reply["reasoning_content"] = steps(a, b, self.digits)
        return Example(f"{a}+{b}", ({"role": "user", "content": f"What is {a} + {b}?"}, reply), answer)

    def examples(self, split: str, n: int, seed: int = 0) -> list[Example]:
        split = check_split(split)
        rng = random.Random(f"addition:{self.digits}:{split}:{seed}")
        low, high = 10 ** (self.digits - 1), 10**self.digits
        space = (high - low) ** 2
        out, seen = [], set()
        while len(out) < n and len(seen) < space:
            a, b = rng.randrange(low, high), rng.randrange(low, high)
            if (a, b) in seen:
                continue
            seen.add((a, b))
            if split_of(f"{a}+{b}") == split:
                out.append(self._example(a, b))
        return out

    def verify(self, response: str, example: Example) -> bool:
        return parse_integer(response) == int(example.answer)
