"""Write evals/data/*.jsonl: SYNTHETIC multiple-choice and GSM8K-layout files made from tinylm's built-in tasks.

These are not HellaSwag, ARC, MMLU or GSM8K: they are small offline files in those datasets' layouts, so
`tinylm eval` and `lm_eval` (through the task configs in evals/lm_eval/) can be run and compared on any
machine with nothing downloaded. Arithmetic rows come from builtin:arith's held-out split, and the
HellaSwag-layout rows from docstrings of the running interpreter's standard library (so a different Python
version may write different rows). Every choice is seeded: the same interpreter writes the same files.

    .venv/bin/python evals/make_synthetic.py
"""

from __future__ import annotations

import json
import random
from pathlib import Path

from tinylm.tasks.arith import OPERATIONS, ArithTask
from tinylm.tasks.stdlib_functions import stdlib_functions

OUT = Path(__file__).with_name("data")
ROWS = 24
SEED = 0


def _arith_choices(key: str, rng: random.Random) -> tuple[str, list[str], int]:
    """(question, four numbers, index of the right one): the sum and three near misses."""
    op = next(c for c in key if c in OPERATIONS)  # operands are never negative: the first sign is the operation
    a, b = key.split(op, 1)
    right = OPERATIONS[op](int(a), int(b))
    choices = [right, right + 1, right - 1, right + 10]
    rng.shuffle(choices)
    return f"What is {a} {op} {b}?", [str(c) for c in choices], choices.index(right)


def arc_rows() -> list[dict]:
    rng = random.Random(f"arc:{SEED}")
    rows = []
    for example in ArithTask(digits=2, ops="+-").examples("test", ROWS, SEED):
        question, choices, gold = _arith_choices(example.key, rng)
        labels = list("ABCD")
        rows.append({"id": f"synthetic-arc-{example.key}", "question": question,
                     "choices": {"text": choices, "label": labels}, "answerKey": labels[gold]})
    return rows


def mmlu_rows() -> list[dict]:
    rng = random.Random(f"mmlu:{SEED}")
    rows = []
    for example in ArithTask(digits=2, ops="*").examples("test", ROWS, SEED):
        question, choices, gold = _arith_choices(example.key, rng)
        rows.append({"question": question, "subject": "synthetic_arithmetic", "choices": choices, "answer": gold})
    return rows


def hellaswag_rows() -> list[dict]:
    """Context: a function's name and the first words of its docstring; endings: its own rest and three others'."""
    rng = random.Random(f"hellaswag:{SEED}")
    pool = []
    for function in stdlib_functions():
        doc = function.header.split('"""')[1].strip().splitlines()[0] if '"""' in function.header else ""
        words = doc.split()
        if 8 <= len(words) <= 20 and doc.isascii():
            pool.append((function.key, words))
    rng.shuffle(pool)
    rows = []
    for index, (key, words) in enumerate(pool[:ROWS]):
        cut = len(words) // 2
        others = [w for _, w in pool[ROWS + 3 * index: ROWS + 3 * index + 3]]
        endings = [" ".join(words[cut:]), *(" ".join(w[len(w) // 2:]) for w in others)]
        order = list(range(4))
        rng.shuffle(order)
        rows.append({"ind": index, "activity_label": "Python", "ctx_a": f"The function {key.split(':')[1]}",
                     "ctx_b": " ".join(words[:cut]), "endings": [endings[i] for i in order],
                     "label": str(order.index(0)), "source_id": f"synthetic-{key}"})
    return rows


def gsm8k_rows() -> list[dict]:
    rows = []
    for example in ArithTask(digits=2, ops="+").examples("test", ROWS, SEED):
        a, b = example.key.split("+")
        rows.append({"question": f"Sam has {a} apples and gets {b} more. How many apples does Sam have?",
                     "answer": f"{a} + {b} = {int(a) + int(b)}\n#### {int(a) + int(b)}"})
    return rows


def main() -> None:
    OUT.mkdir(exist_ok=True)
    for name, rows in (("arc", arc_rows()), ("mmlu", mmlu_rows()), ("hellaswag", hellaswag_rows()),
                       ("gsm8k", gsm8k_rows())):
        text = "".join(json.dumps(row) + "\n" for row in rows)
        (OUT / f"synthetic_{name}.jsonl").write_text(text, encoding="utf-8")
        print(f"{OUT / f'synthetic_{name}.jsonl'}: {len(rows)} rows")


if __name__ == "__main__":
    main()
