"""Preference pairs from a task: for each problem, its verified answer over one of its own wrong answers.

    user: What is 48 + 7?      chosen: 55      rejected: 54 (off by one) | 41 (wrong operation) | 58 (a digit)

The task makes both sides (`Task.preferred_answer`, `Task.wrong_answers`: each task knows the
mistakes a small model makes at it) and its verifier proves them: the chosen answer must pass, a
rejected one must fail. Which mistake a problem gets is drawn from a generator seeded by the seed and
the problem's key, so the same spec, split and seed give the same pairs everywhere, and the split is
the task's own (a held-out problem is never a training pair). The same spec names the task for
`tinylm sft` (conversations) and for `tinylm dpo` / `tinylm reward` (pairs).
"""

from __future__ import annotations

import random
from dataclasses import dataclass

from tinylm.errors import TinyLMError
from tinylm.tasks.registry import get_task
from tinylm.tasks.task import Example, Task


@dataclass(frozen=True)
class PreferencePair:
    example: Example  # the problem (its prompt and reference)
    chosen: str  # verified correct
    rejected: str  # verified wrong
    mistake: str  # which kind of wrong answer


def task_pairs(task: Task, examples: list[Example], seed: int) -> list[PreferencePair]:
    """One pair per example that has a wrong answer the verifier rejects (problems without one are left out)."""
    pairs = []
    for example in examples:
        mistakes = task.wrong_answers(example)  # first: a task without any says so before a verifier runs
        chosen = task.preferred_answer(example)
        if not task.verify(chosen, example):
            raise TinyLMError(f"task {task.name!r}: the reference of {example.key} fails its own verifier")
        wrong = {kind: text for kind, text in mistakes.items()
                 if text.strip() and text != chosen and not task.verify(text, example)}
        if wrong:
            kind = random.Random(f"pairs:{seed}:{example.key}").choice(sorted(wrong))
            pairs.append(PreferencePair(example, chosen, wrong[kind], kind))
    return pairs


def preference_pairs(spec: str, split: str, n: int, seed: int = 0) -> list[PreferencePair]:
    """Up to n verified pairs of `split` of the task a spec names (deterministic from the seed)."""
    task = get_task(spec)
    return task_pairs(task, task.examples(split, n, seed), seed)
