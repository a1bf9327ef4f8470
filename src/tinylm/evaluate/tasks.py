"""The evaluation tasks `tinylm eval --tasks` names, one spec each, all checked before a model is loaded.

    bpb                      bits per byte on the dev split of the corpus the model was pretrained on
    bpb:DIR                  ... of a prepared data folder
    passkey[:LEN]            passkey retrieval at LEN tokens (default: the model's context), by depth
    bpb_positions[:LEN]      bits per byte by position bucket on dev windows of LEN tokens (pretraining data)
    builtin:NAME[?k=v&...]   a task's held-out split, greedy exact-match (and pass@k on request), named
                             as in training (builtin:arith, builtin:docstring, builtin:code, ...)
    code                     builtin:code: write small functions; replies run against tests in the sandbox
    gsm8k:FILE               GSM8K-layout JSONL (answer after ####), every row held out
    hellaswag:FILE, arc:FILE, mmlu:FILE
                             multiple choice by log-likelihood: acc and acc_norm
    prefs:TASK               preference accuracy: how often the model gives the verified answer of a
                             held-out pair of a task spec more probability than the task's wrong one
    prefs:FILE               ... the chosen answer of each pair of a prompt/chosen/rejected file
                             (`preference_file.py`) more than its rejected one

Which specs name a task, and which task, is `tasks/registry.py`'s alone; this module only adds the
kinds that are not tasks. FILE may be `hf:NAME[:CONFIG][:SPLIT]` (split `test` unless named) where a
network is at hand; files and datasets are read by the one row reader (`data/rows/`).
Multiple-choice tasks also feed the chance-centred aggregate `core` (`core.py`).
"""

from __future__ import annotations

import dataclasses
from abc import ABC, abstractmethod
from dataclasses import dataclass, field
from functools import cached_property
from pathlib import Path
from typing import Any

import torch
from torch import nn

from tinylm.errors import TinyLMError
from tinylm.evaluate.bpb import corpus_bpb, pretraining_data
from tinylm.evaluate.exact_match import exact_match, pass_at_k
from tinylm.evaluate.long_context import bpb_by_position, passkey_accuracy
from tinylm.evaluate.multiple_choice import load_questions, score_questions
from tinylm.evaluate.preference_accuracy import preference_accuracy
from tinylm.evaluate.preference_file import load_preference_file
from tinylm.options import BATCH_SIZE, COUNT_LIMIT, MAX_NEW_TOKENS, SEED, TEMPERATURE, Option, check_options
from tinylm.tasks.preference_pairs import PreferencePair, preference_pairs
from tinylm.tasks.registry import get_task, is_task_spec
from tinylm.tasks.task import Task
from tinylm.tokenizer.chat_format import ChatFormat
from tinylm.tokenizer.tokenizer import Tokenizer

CHOICE_LAYOUTS = ("hellaswag", "arc", "mmlu")
KNOWN = ("bpb, bpb:DIR, passkey[:LEN], bpb_positions[:LEN], "
         "builtin:NAME, code, gsm8k:FILE, hellaswag:FILE, arc:FILE, mmlu:FILE, prefs:builtin:NAME, "
         "prefs:FILE")


@dataclass
class EvalOptions:
    """How `tinylm eval` (and the pipeline's [eval] table) scores: each field is its flag (cli/commands/eval.py)."""

    examples: int = Option("problems / questions / pairs per task, at most", low=1, high=COUNT_LIMIT)(200)
    seed: int = SEED(0)
    batch_size: int = BATCH_SIZE(32)
    max_new_tokens: int = dataclasses.replace(MAX_NEW_TOKENS, low=1)(32)  # a reply of no tokens scores nothing
    pass_k: int = Option("also pass@K for generative tasks, from sampled replies; 0 = greedy exact-match only",
                         low=0, high=1000, metavar="K")(0)
    samples: int = Option("sampled replies per problem for pass@K (0: 2K)", low=0, high=1000, metavar="N")(0)
    temperature: float = TEMPERATURE(0.8, note="of pass@K's samples, > 0")
    bpb_batches: int = Option("dev batches for bpb, of --batch-size windows", low=1, high=COUNT_LIMIT)(20)

    def __post_init__(self) -> None:
        self.validate()

    def validate(self) -> None:
        """Each option's own range, then what no single option can say."""
        check_options(self)
        if self.pass_k and self.samples and self.samples < self.pass_k:
            raise TinyLMError(f"--samples {self.samples} is fewer than --pass-k {self.pass_k}")
        if self.pass_k and not self.temperature > 0:
            raise TinyLMError("pass@k samples its replies: --temperature must be > 0")


@dataclass
class Subject:
    """The model under evaluation, with its tokenizer and checkpoint metadata."""

    model: nn.Module
    tokenizer: Tokenizer
    meta: dict[str, Any]

    @cached_property
    def chat(self) -> ChatFormat:
        return ChatFormat.from_tokenizer(self.tokenizer)


@dataclass
class TaskResult:
    task: str
    metrics: dict[str, float]
    samples: list[dict[str, Any]] = field(default_factory=list)
    chance: float | None = None  # multiple choice: the accuracy of guessing (for `core`)
    outcomes: str = ""  # exact-match: '1'/'0' per problem in order, so two models' scores can be paired


class EvalTask(ABC):
    spec: str

    @abstractmethod
    def run(self, subject: Subject, options: EvalOptions) -> TaskResult:
        """Score the subject; deterministic for the options' seed."""


# ---- the kinds of task ----------------------------------------------------------------------------
@dataclass
class BitsPerByte(EvalTask):
    spec: str
    data: Path | None  # None: the lineage's pretraining data

    def run(self, subject: Subject, options: EvalOptions) -> TaskResult:
        data = self.data or pretraining_data(subject.meta)
        result = corpus_bpb(subject.model, subject.tokenizer, data, options.batch_size, options.bpb_batches)
        return TaskResult(self.spec, result)


@dataclass
class Passkey(EvalTask):
    spec: str
    length: int | None  # None: the model's context

    def run(self, subject: Subject, options: EvalOptions) -> TaskResult:
        length = self.length or subject.model.config.context_length
        trials = max(1, options.examples // 5)  # five depths
        return TaskResult(self.spec, passkey_accuracy(subject.model, subject.tokenizer, length, trials, options.seed))


@dataclass
class BitsPerBytePositions(EvalTask):
    spec: str
    length: int | None

    def run(self, subject: Subject, options: EvalOptions) -> TaskResult:
        length = self.length or subject.model.config.context_length
        return TaskResult(self.spec, bpb_by_position(subject.model, subject.tokenizer, pretraining_data(subject.meta),
                                                     length, options.batch_size, options.bpb_batches))


def _length(spec: str, rest: str) -> int | None:
    if not rest:
        return None
    if not rest.isdigit() or int(rest) < 1:
        raise TinyLMError(f"{spec!r}: the length after ':' must be a whole number of tokens >= 1")
    return int(rest)


@dataclass
class Generative(EvalTask):
    spec: str
    task: Task

    def run(self, subject: Subject, options: EvalOptions) -> TaskResult:
        examples = self.task.examples("test", options.examples, options.seed)
        score = exact_match(subject.model, subject.chat, self.task, examples, options.max_new_tokens)
        metrics = {"exact_match": score.accuracy}
        if options.pass_k:
            k = options.pass_k
            sampled = pass_at_k(subject.model, subject.chat, self.task, examples, options.max_new_tokens, k,
                                options.samples or 2 * k, options.temperature, options.seed)
            metrics[f"pass@{k}"] = sampled.score
        samples = [{"prompt": p, "reply": r, "ok": ok} for p, r, ok in score.samples]
        return TaskResult(self.spec, metrics, samples, outcomes="".join("1" if v else "0" for v in score.verdicts))


@dataclass
class MultipleChoice(EvalTask):
    spec: str
    layout: str
    questions: list[Any]

    def run(self, subject: Subject, options: EvalOptions) -> TaskResult:
        scores = score_questions(subject.model, subject.tokenizer, self.questions[:options.examples],
                                 options.batch_size)
        return TaskResult(self.spec, {"acc": scores.accuracy, "acc_norm": scores.accuracy_norm}, chance=scores.chance)


@dataclass
class Preferences(EvalTask):
    spec: str
    task_spec: str | None  # a task's held-out pairs, or None for those read from a file
    file_pairs: list[PreferencePair] = field(default_factory=list)

    def run(self, subject: Subject, options: EvalOptions) -> TaskResult:
        if self.task_spec is None:
            pairs = self.file_pairs[:options.examples]
        else:
            pairs = preference_pairs(self.task_spec, "test", options.examples, options.seed)
        return TaskResult(self.spec, {"preference_accuracy": preference_accuracy(
            subject.model, subject.chat, pairs, options.batch_size)})


# ---- parsing ----------------------------------------------------------------------------------------
def parse_task(spec: str) -> EvalTask:
    """The task a spec names, its files read and checked (TinyLMError: one line)."""
    kind, _, rest = spec.partition(":")
    if spec == "bpb" or kind == "bpb":
        return BitsPerByte(spec, Path(rest) if rest else None)
    if kind == "passkey":
        return Passkey(spec, _length(spec, rest))
    if kind == "bpb_positions":
        return BitsPerBytePositions(spec, _length(spec, rest))
    if kind in CHOICE_LAYOUTS and rest:
        return MultipleChoice(spec, kind, load_questions(kind, rest))
    if kind == "prefs" and rest and is_task_spec(rest):
        get_task(rest)  # an unknown task fails here, before the model loads
        return Preferences(spec, rest)
    if kind == "prefs" and rest:
        return Preferences(spec, None, load_preference_file(rest))
    if is_task_spec(spec):
        return Generative(spec, get_task(spec))
    raise TinyLMError(f"unknown evaluation task {spec!r}: known are {KNOWN}")


def parse_tasks(text: str) -> list[EvalTask]:
    specs = [s.strip() for s in text.split(",") if s.strip()]
    if not specs:
        raise TinyLMError(f"--tasks is empty: name some of {KNOWN}")
    return [parse_task(s) for s in specs]


@torch.no_grad()
def run_tasks(subject: Subject, tasks: list[EvalTask], options: EvalOptions) -> list[TaskResult]:
    return [task.run(subject, options) for task in tasks]
