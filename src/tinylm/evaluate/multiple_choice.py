"""Multiple choice by log-likelihood: HellaSwag, ARC and MMLU layouts, scored as lm-eval scores them.

A question is a context and k choices. Each choice is scored as the continuation " " + choice of the
context (`loglikelihood.py`); the model's answer is the likeliest choice:

    acc      = mean over questions of [argmax_i  logp_i            == gold]
    acc_norm = mean over questions of [argmax_i  logp_i / chars_i  == gold]

where chars_i is the length of choice i in characters (without the space): a long ending has more
tokens, so a lower total log-probability, and normalising removes that bias. The contexts are built
exactly as lm-eval's own task configs build them (zero-shot), and a pair is encoded as lm-eval does:
the context's trailing spaces move to the continuation, then the continuation's ids are what the
whole string's ids hold after the context's. So the ids, and the accuracies, agree with
`lm_eval --model hf` on the exported model (tests/test_lm_eval_agreement.py).

    hellaswag  {"activity_label", "ctx_a", "ctx_b", "endings": [4], "label"}
    arc        {"question", "choices": {"text": [...], "label": [...]}, "answerKey"}
    mmlu       {"question", "subject", "choices": [4], "answer": 0..3}
"""

from __future__ import annotations

import re
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from functools import partial
from typing import Any

from torch import nn

from tinylm.data.rows.error import RowError
from tinylm.data.rows.read import no_rows, read_rows
from tinylm.errors import TinyLMError
from tinylm.evaluate.loglikelihood import score_continuations
from tinylm.tokenizer.tokenizer import Tokenizer

DELIMITER = " "  # lm-eval's default target_delimiter between context and choice


@dataclass(frozen=True)
class Question:
    context: str
    choices: tuple[str, ...]
    gold: int


@dataclass
class ChoiceScores:
    accuracy: float
    accuracy_norm: float
    questions: int
    chance: float  # mean of 1 / k: the accuracy of guessing
    logprobs: list[list[float]]  # per question, per choice


# ---- the three layouts ------------------------------------------------------------------------------
def _hellaswag_text(text: str) -> str:
    """lm-eval's HellaSwag clean-up: WikiHow's bracketed artefacts removed, double spaces collapsed."""
    text = text.strip().replace(" [title]", ". ")
    return re.sub(r"\[.*?\]", "", text).replace("  ", " ")


def _hellaswag(row: dict[str, Any]) -> Question:
    context = row["ctx_a"] + " " + row["ctx_b"].capitalize()
    return Question(_hellaswag_text(row["activity_label"] + ": " + context),
                    tuple(_hellaswag_text(e) for e in row["endings"]), int(row["label"]))


def _arc(row: dict[str, Any]) -> Question:
    labels = list(row["choices"]["label"])
    if row["answerKey"] not in labels:
        raise ValueError(f"answerKey {row['answerKey']!r} is not one of the labels {labels}")
    return Question(f"Question: {row['question']}\nAnswer:", tuple(row["choices"]["text"]),
                    labels.index(row["answerKey"]))


def _mmlu(row: dict[str, Any]) -> Question:
    choices = list(row["choices"])
    if len(choices) != 4:
        raise ValueError(f"an MMLU row has 4 choices, got {len(choices)}")
    lines = [row["question"].strip(), *(f"{letter}. {text}" for letter, text in zip("ABCD", choices))]
    answer = int(row["answer"])
    if not 0 <= answer < 4:
        raise ValueError(f"answer must be 0..3, got {answer}")
    return Question("\n".join(lines) + "\nAnswer:", ("A", "B", "C", "D"), answer)


LAYOUTS: dict[str, Callable[[dict[str, Any]], Question]] = {"hellaswag": _hellaswag, "arc": _arc, "mmlu": _mmlu}


def _question(layout: str, row: Any) -> Question:
    """One row in `layout` as a checked question; RowError says what is wrong with it."""
    try:
        question = LAYOUTS[layout](row)
        if len(question.choices) < 2 or not 0 <= question.gold < len(question.choices):
            raise ValueError(f"needs at least 2 choices and a gold index among them, got {question.gold}")
        if not all(isinstance(c, str) and c for c in question.choices) or not question.context:
            raise ValueError("context and choices must be non-empty strings")
    except (KeyError, TypeError, ValueError, AttributeError) as exc:
        what = f"missing field {exc}" if isinstance(exc, KeyError) else str(exc)
        raise RowError(f"not a valid {layout} row ({what})") from None
    return question


def load_questions(layout: str, source: str, limit: int | None = None) -> list[Question]:
    """The questions of a data file (or `hf:` dataset, split `test` unless named) in `layout`, read by the one row
    reader (`data/rows/`); a malformed row is one line naming file:line."""
    if layout not in LAYOUTS:
        raise TinyLMError(f"unknown multiple-choice layout {layout!r} (known: {', '.join(LAYOUTS)})")
    questions = read_rows(source, partial(_question, layout), split="test", limit=limit).parsed
    if not questions:
        raise no_rows(source, f"{layout} rows", [])
    return questions


# ---- scoring ----------------------------------------------------------------------------------------
def encode_pair(tokenizer: Tokenizer, context: str, continuation: str) -> tuple[list[int], list[int]]:
    """lm-eval's split of a (context, continuation) pair into ids (see the module docstring)."""
    spaces = len(context) - len(context.rstrip())
    if spaces:
        context, continuation = context[:-spaces], context[-spaces:] + continuation
    whole = tokenizer.encode_ordinary(context + continuation)
    context_ids = tokenizer.encode_ordinary(context)
    return context_ids, whole[len(context_ids):]


def _argmax(values: Sequence[float]) -> int:
    return max(range(len(values)), key=lambda i: (values[i], -i))  # the first of equals, as numpy's argmax


def score_questions(model: nn.Module, tokenizer: Tokenizer, questions: Sequence[Question],
                    batch_size: int = 32) -> ChoiceScores:
    """acc, acc_norm and every choice's log-likelihood for `questions`."""
    requests = [encode_pair(tokenizer, q.context, DELIMITER + choice) for q in questions for choice in q.choices]
    flat = [s.logprob for s in score_continuations(model, requests, batch_size)]
    logprobs, correct, correct_norm, offset = [], 0, 0, 0
    for q in questions:
        lls = flat[offset:offset + len(q.choices)]
        offset += len(q.choices)
        logprobs.append(lls)
        correct += _argmax(lls) == q.gold
        correct_norm += _argmax([ll / len(c) for ll, c in zip(lls, q.choices, strict=True)]) == q.gold
    n = len(questions)
    return ChoiceScores(correct / n, correct_norm / n, n, sum(1 / len(q.choices) for q in questions) / n, logprobs)
