"""Built-in preference pairs: for each task problem, the verified answer over a plausible wrong one.

    user: What is 48 + 7?      chosen: 55      rejected: 54 (off by one) | 41 (wrong operation) | 58 (a digit)

The preferred answer is the task's reference, checked by the task's own verifier; the rejected one is
the kind of mistake a small model makes, and the verifier must reject it: for arithmetic an off-by-one,
the wrong operation or one wrong digit; for functions a mutated body (a comparison flipped, a constant
changed, a return value replaced, the last statement dropped) that still parses. Which mistake a
problem gets is drawn from a generator seeded by the seed and the problem's key, so the same spec,
split and seed give the same pairs everywhere, and the split is the task's own (a held-out problem is
never a training pair). The same spec names the task for `tinylm sft` (conversations) and for
`tinylm dpo` / `tinylm reward` (pairs).
"""

from __future__ import annotations

import ast
import random
from collections.abc import Callable
from dataclasses import dataclass

from tinylm.errors import TinyLMError
from tinylm.tasks.arith import OPERATIONS, ArithTask
from tinylm.tasks.registry import get_task
from tinylm.tasks.stdlib_functions import StdlibFunctionTask
from tinylm.tasks.task import Example, Task


@dataclass(frozen=True)
class PreferencePair:
    example: Example  # the problem (its prompt and reference)
    chosen: str  # verified correct
    rejected: str  # verified wrong
    mistake: str  # which kind of wrong answer


# ---- arithmetic -----------------------------------------------------------------------------------
def _arith_mistakes(example: Example) -> dict[str, str]:
    a, op, b = _parse_arith(example.key)
    right = OPERATIONS[op](a, b)
    others = [OPERATIONS[o](a, b) for o in OPERATIONS if o != op and OPERATIONS[o](a, b) != right]
    digits = str(abs(right))
    position = len(digits) - 1  # the last digit: the one a carry mistake changes
    wrong_digit = digits[:position] + str((int(digits[position]) + 3) % 10)
    return {"off_by_one": str(right + 1), "off_by_minus_one": str(right - 1),
            "wrong_operation": str(others[0]) if others else str(right + 10),
            "wrong_digit": ("-" if right < 0 else "") + wrong_digit}


def _parse_arith(key: str) -> tuple[int, str, int]:
    for index in range(1, len(key)):  # the operator is the first op character after the first digit
        if key[index] in OPERATIONS:
            return int(key[:index]), key[index], int(key[index + 1:])
    raise ValueError(f"not an arithmetic key: {key!r}")


# ---- functions ------------------------------------------------------------------------------------
_FLIPS = {ast.Lt: ast.GtE, ast.LtE: ast.Gt, ast.Gt: ast.LtE, ast.GtE: ast.Lt, ast.Eq: ast.NotEq, ast.NotEq: ast.Eq,
          ast.Is: ast.IsNot, ast.IsNot: ast.Is, ast.In: ast.NotIn, ast.NotIn: ast.In}


def _function_mistakes(example: Example) -> dict[str, str]:
    """Mutations of the reference function, each the first place it applies (fewer when none does)."""
    out: dict[str, str] = {}
    for name, mutate in (("flipped_comparison", _flip_comparison), ("changed_constant", _change_constant),
                         ("returns_none", _return_none), ("dropped_statement", _drop_last)):
        tree = ast.parse(example.answer)
        if mutate(tree.body[0]):
            out[name] = ast.unparse(tree) + "\n"
    return out


def _flip_comparison(function: ast.AST) -> bool:
    for node in ast.walk(function):
        if isinstance(node, ast.Compare) and type(node.ops[0]) in _FLIPS:
            node.ops[0] = _FLIPS[type(node.ops[0])]()
            return True
    return False


def _change_constant(function: ast.AST) -> bool:
    for node in ast.walk(function):
        if isinstance(node, ast.Constant) and type(node.value) is int:
            node.value += 1
            return True
    return False


def _return_none(function: ast.AST) -> bool:
    for node in ast.walk(function):
        if isinstance(node, ast.Return) and node.value is not None and not (
                isinstance(node.value, ast.Constant) and node.value.value is None):
            node.value = ast.Constant(None)
            return True
    return False


def _drop_last(function: ast.AST) -> bool:
    body = function.body  # type: ignore[attr-defined]
    if len(body) > 2:  # keep the docstring and at least one statement
        body.pop()
        return True
    return False


def _unparsed(example: Example) -> str:
    """The reference as `ast.unparse` writes it, the layout of its mutations: formatting is no tell."""
    return ast.unparse(ast.parse(example.answer)) + "\n"


# task type -> (the chosen answer written as its mistakes are, the mistakes)
MISTAKES: dict[type, tuple[Callable[[Example], str], Callable[[Example], dict[str, str]]]] = {
    ArithTask: (lambda example: example.answer, _arith_mistakes),
    StdlibFunctionTask: (_unparsed, _function_mistakes),
}


def task_pairs(task: Task, examples: list[Example], seed: int) -> list[PreferencePair]:
    """One pair per example that has a wrong answer the verifier rejects (problems without one are left out)."""
    if type(task) not in MISTAKES:
        raise TinyLMError(f"builtin:{task.name} has no preference pairs (known: arith, docstring)")
    canonical, mistakes = MISTAKES[type(task)]
    pairs = []
    for example in examples:
        chosen = canonical(example)
        if not task.verify(chosen, example):
            raise TinyLMError(f"builtin:{task.name}: the reference of {example.key} fails its own verifier")
        wrong = {kind: text for kind, text in mistakes(example).items()
                 if text.strip() and text != chosen and not task.verify(text, example)}
        if wrong:
            kind = random.Random(f"pairs:{seed}:{example.key}").choice(sorted(wrong))
            pairs.append(PreferencePair(example, chosen, wrong[kind], kind))
    return pairs


def preference_pairs(spec: str, split: str, n: int, seed: int = 0) -> list[PreferencePair]:
    """Up to n verified pairs of `split` of the task a spec names (deterministic from the seed)."""
    task = get_task(spec)
    return task_pairs(task, task.examples(split, n, seed), seed)
