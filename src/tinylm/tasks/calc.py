"""builtin:calc: arithmetic too hard for a small model's weights, to be done with the calculator tool.

    system:    Tools: {"type": "function", "function": {"name": "calculator", ...}}
    user:      What is 347 * 582?
    assistant: <|call|>calculator\\n{"expression": "347*582"}<|/call|>
    tool:      201954
    assistant: 201954

Half the problems (`hard_share`) are hard, a 3-digit times 3-digit product, which a model of the
demo's size cannot learn from its weights in minutes; the rest are easy, a one-digit sum or product,
which the reference trace answers directly, with no call: a model should learn when a tool is worth
calling, not to call it always. `tool=0` gives the same problems with the tool declared nowhere and
every answer written directly: the baseline that shows what the tool is worth. `even_lengths=1`
draws the train split's hard products so that 5- and 6-digit answers are equally common, where
17% of 3-digit x 3-digit products have 5 digits: RL on the natural mix learns a copy that is right
for six digits only (docs/posttrain/tools.md), and the rare length gives its groups nothing to
learn from. The test split keeps the natural mix, so every score is on the same problems. `verify`
reads the last integer of the final answer, as builtin:arith does; `Example.prompt` is the system
turn with the tools and the user's question, so whatever the model does after it (calls included)
is its own.
"""

from __future__ import annotations

import json
import random

from tinylm.errors import TinyLMError
from tinylm.tasks.arith import parse_integer
from tinylm.tasks.task import Example, Task, check_split, split_of
from tinylm.tools.registry import BUILTIN_TOOLS

HARD_DIGITS = 3
CALCULATOR = BUILTIN_TOOLS["calculator"]


def hard(example: Example) -> bool:
    """Whether an example is one of the hard problems (the ones meant for the tool)."""
    return example.key.startswith("hard:")


class CalcTask(Task):
    name = "calc"

    def __init__(self, hard_share: float = 0.5, tool: int = 1, even_lengths: int = 0) -> None:
        if not 0.0 <= hard_share <= 1.0:
            raise TinyLMError(f"builtin:calc: hard_share={hard_share} must be between 0 and 1")
        if tool not in (0, 1):
            raise TinyLMError(f"builtin:calc: tool={tool} must be 0 (answer directly) or 1 (use the calculator)")
        if even_lengths not in (0, 1):
            raise TinyLMError(f"builtin:calc: even_lengths={even_lengths} must be 0 (the natural mix of answer "
                              "lengths) or 1 (5- and 6-digit products equally common in the train split)")
        self.hard_share, self.tool, self.even_lengths = hard_share, bool(tool), bool(even_lengths)
        self.tools = (CALCULATOR.name,) if tool else ()

    def _example(self, a: int, op: str, b: int, is_hard: bool) -> Example:
        answer = str(a * b if op == "*" else a + b)
        key = f"{'hard' if is_hard else 'easy'}:{a}{op}{b}"
        user = {"role": "user", "content": f"What is {a} {op} {b}?"}
        if not self.tool:
            return Example(key, (user, {"role": "assistant", "content": answer}), answer)
        system = {"role": "system", "content": "", "tools": [CALCULATOR.declaration()]}
        if not is_hard:
            return Example(key, (system, user, {"role": "assistant", "content": answer}), answer, prompt_turns=2)
        call = {"type": "function", "function": {"name": CALCULATOR.name,
                                                 "arguments": json.dumps({"expression": f"{a}{op}{b}"})}}
        trace = (system, user, {"role": "assistant", "content": "", "tool_calls": [call]},
                 {"role": "tool", "content": answer}, {"role": "assistant", "content": answer})
        return Example(key, trace, answer, prompt_turns=2)

    def examples(self, split: str, n: int, seed: int = 0) -> list[Example]:
        split = check_split(split)
        rng = random.Random(f"calc:{split}:{seed}")
        easy_space = [(a, op, b) for op in "+*" for a in range(10) for b in range(10)
                      if split_of(f"easy:{a}{op}{b}") == split]
        n_hard = round(n * self.hard_share)
        out, seen = [], set()
        while len(out) < n_hard:
            a, b = self._hard_operands(rng, even=self.even_lengths and split == "train")
            if (a, b) not in seen and split_of(f"hard:{a}*{b}") == split:
                seen.add((a, b))
                out.append(self._example(a, "*", b, True))
        out += [self._example(*rng.choice(easy_space), False) for _ in range(n - n_hard)]
        rng.shuffle(out)
        return out

    @staticmethod
    def _hard_operands(rng: random.Random, even: bool) -> tuple[int, int]:
        """Two HARD_DIGITS-digit numbers; with `even`, a product of either length with equal odds."""
        low, high = 10 ** (HARD_DIGITS - 1), 10**HARD_DIGITS
        short = rng.random() < 0.5 if even else None  # a product of 2 * HARD_DIGITS - 1 digits?
        while True:
            a, b = rng.randrange(low, high), rng.randrange(low, high)
            if short is None or (a * b < 10 ** (2 * HARD_DIGITS - 1)) == short:
                return a, b

    def verify(self, response: str, example: Example) -> bool:
        return parse_integer(response) == int(example.answer)
