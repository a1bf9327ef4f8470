"""builtin:code: write a small Python function; the answer is right when its tests pass in the sandbox.

    user:      Write a Python function `f(x)` that returns x * 3 + 4.
    assistant: def f(x):
                   return x * 3 + 4

Unlike `builtin:docstring`, which compares syntax trees, any program that behaves right passes: the
reply (a ``` fence around it allowed) runs in the sandbox (`sandbox/run.py`) followed by assertions on
inputs the model never saw, and the verdict is the exit status. Problems are drawn from a few
families whose parameters come from the seed; the problem's key ("affine:3:4") decides its split, as
for every built-in task, and the tests are computed here from the key, never from the reply. Its
wrong answers are mutations of the reference (`function_mistakes.py`); each is proven wrong by the
sandbox, one process per candidate, so pairs of this task are slower to make than the others'.
"""

from __future__ import annotations

import ast
import random
import re
from collections.abc import Callable

from tinylm.sandbox import run_python
from tinylm.tasks.function_mistakes import function_mistakes, unparsed
from tinylm.tasks.task import Example, Task, check_split, conversation, split_of

_FENCE = re.compile(r"```(?:python)?\n(.*?)```", re.DOTALL)
INPUTS = (-3, 0, 1, 2, 7, 12)


def _affine(a: int, b: int) -> tuple[str, str, Callable[[int], object]]:
    return f"returns x * {a} + {b}", f"return x * {a} + {b}", lambda x: x * a + b


def _clamp(a: int, b: int) -> tuple[str, str, Callable[[int], object]]:
    low, high = min(a, b), max(a, b)
    return (f"returns x limited to the range {low} to {high}", f"return max({low}, min({high}, x))",
            lambda x: max(low, min(high, x)))


def _repeat(a: int, b: int) -> tuple[str, str, Callable[[int], object]]:
    word = "ab"[: 1 + a % 2] * (1 + b % 3)
    return (f"returns the string {word!r} repeated x times (empty when x <= 0)", f"return {word!r} * x",
            lambda x: word * x)


def _count(a: int, b: int) -> tuple[str, str, Callable[[int], object]]:
    return (f"returns how many of the numbers 0 to x - 1 are divisible by {a}",
            f"return len([n for n in range(x) if n % {a} == 0])", lambda x: len([n for n in range(x) if n % a == 0]))


FAMILIES: dict[str, Callable[[int, int], tuple[str, str, Callable[[int], object]]]] = {
    "affine": _affine, "clamp": _clamp, "repeat": _repeat, "count": _count}


def _program(reply: str) -> str | None:
    """The reply's code (inside a fence if there is one), or None when it is not Python at all."""
    fenced = _FENCE.search(reply)
    code = fenced.group(1) if fenced else reply
    try:
        ast.parse(code)
    except (SyntaxError, ValueError):
        return None
    return code


class CodeTask(Task):
    name = "code"

    def _example(self, family: str, a: int, b: int) -> Example:
        description, body, _ = FAMILIES[family](a, b)
        return conversation(f"{family}:{a}:{b}", f"Write a Python function `f(x)` that {description}.",
                            f"def f(x):\n    {body}\n")

    def examples(self, split: str, n: int, seed: int = 0) -> list[Example]:
        split = check_split(split)
        problems = [(family, a, b) for family in FAMILIES for a in range(1, 10) for b in range(10)
                    if split_of(f"{family}:{a}:{b}") == split]
        random.Random(f"code:{split}:{seed}").shuffle(problems)
        return [self._example(*p) for p in problems[:n]]

    def tests(self, example: Example) -> str:
        family, a, b = example.key.split(":")
        _, _, reference = FAMILIES[family](int(a), int(b))
        return "\n".join(f"assert f({x}) == {reference(x)!r}, {x}" for x in INPUTS)

    def verify(self, response: str, example: Example) -> bool:
        program = _program(response)
        if program is None or "def f" not in program:
            return False  # no need to start a process to know
        return run_python(f"{program}\n\n{self.tests(example)}\n", timeout=5.0).ok

    def wrong_answers(self, example: Example) -> dict[str, str]:
        return function_mistakes(example.answer)

    def preferred_answer(self, example: Example) -> str:
        return unparsed(example.answer)
