"""builtin:arith: integer arithmetic, `a op b` with operands of up to `digits` digits.

    user:      What is 487 * 62?
    assistant: 30194

The answer is just the integer (a minus sign if negative, no separators): the shortest format a
tiny model can learn. `verify` reads the last integer in a response (commas and underscores
between digits removed), so "30194", "= 30,194" and "The answer is 30194." all pass.

Its wrong answers are the mistakes a small model makes: off by one either way, the wrong operation,
or the last digit (the one a carry changes) wrong.
"""

from __future__ import annotations

import random
import re
from collections.abc import Iterator

from tinylm.errors import TinyLMError
from tinylm.tasks.task import Example, Task, check_split, conversation, split_of

OPERATIONS = {"+": lambda a, b: a + b, "-": lambda a, b: a - b, "*": lambda a, b: a * b}
ENUMERATE_BELOW = 200_000  # smaller problem spaces are listed whole, so n can be all of a split
_INTEGER = re.compile(r"-?\d+")
_SEPARATOR = re.compile(r"(?<=\d)[,_](?=\d)")


def parse_key(key: str) -> tuple[int, str, int]:
    """A problem's parts from its key, "487*62" -> (487, "*", 62); the operator is the first after a digit."""
    for index in range(1, len(key)):
        if key[index] in OPERATIONS:
            return int(key[:index]), key[index], int(key[index + 1:])
    raise ValueError(f"not an arithmetic key: {key!r}")


def parse_integer(text: str) -> int | None:
    """The last integer written in `text`, or None."""
    found = _INTEGER.findall(_SEPARATOR.sub("", text))
    return int(found[-1]) if found else None


class ArithTask(Task):
    name = "arith"

    def __init__(self, digits: int = 3, ops: str = "+-*") -> None:
        if not 1 <= digits <= 18:
            raise TinyLMError(f"builtin:arith: digits={digits} must be between 1 and 18")
        unknown = sorted(set(ops) - set(OPERATIONS))
        if not ops or unknown:
            raise TinyLMError(f"builtin:arith: ops={ops!r}: use some of {''.join(OPERATIONS)}")
        self.digits, self.ops = digits, "".join(sorted(set(ops), key=list(OPERATIONS).index))

    def _example(self, a: int, op: str, b: int) -> Example:
        return conversation(f"{a}{op}{b}", f"What is {a} {op} {b}?", str(OPERATIONS[op](a, b)))

    def _space(self) -> int:
        return (10**self.digits) ** 2 * len(self.ops)

    def _all(self) -> Iterator[tuple[int, str, int]]:
        top = 10**self.digits
        return ((a, op, b) for op in self.ops for a in range(top) for b in range(top))

    def examples(self, split: str, n: int, seed: int = 0) -> list[Example]:
        split = check_split(split)
        rng = random.Random(f"arith:{split}:{seed}")
        if self._space() <= max(ENUMERATE_BELOW, 20 * n):  # else at most half a split is asked for: sampling ends
            problems = [p for p in self._all() if split_of(f"{p[0]}{p[1]}{p[2]}") == split]
            rng.shuffle(problems)
            return [self._example(*p) for p in problems[:n]]
        top, seen, out = 10**self.digits, set(), []
        while len(out) < n:
            a, op, b = rng.randrange(top), rng.choice(self.ops), rng.randrange(top)
            key = f"{a}{op}{b}"
            if key not in seen and split_of(key) == split:
                seen.add(key)
                out.append(self._example(a, op, b))
        return out

    def verify(self, response: str, example: Example) -> bool:
        return parse_integer(response) == int(example.answer)

    def wrong_answers(self, example: Example) -> dict[str, str]:
        a, op, b = parse_key(example.key)
        right = OPERATIONS[op](a, b)
        others = [OPERATIONS[o](a, b) for o in OPERATIONS if o != op and OPERATIONS[o](a, b) != right]
        digits = str(abs(right))
        position = len(digits) - 1  # the last digit: the one a carry mistake changes
        wrong_digit = digits[:position] + str((int(digits[position]) + 3) % 10)
        return {"off_by_one": str(right + 1), "off_by_minus_one": str(right - 1),
                "wrong_operation": str(others[0]) if others else str(right + 10),
                "wrong_digit": ("-" if right < 0 else "") + wrong_digit}
