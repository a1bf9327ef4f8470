"""Exact-match and pass@k on a verifiable task: ask the model every held-out problem, let the verifier judge.

The prompts are rendered with the chat format (ending with the assistant header), generated in one
left-padded batch by the KV-cache engine until the end-of-turn token, decoded and verified. A task
whose prompts declare tools (builtin:calc) runs through the tool loop (`inference/tool_loop.py`):
the model's calls run, their results are appended, and the final answer is what is verified. Greedy
by default, so the score is a deterministic function of the weights. The engine runs without the
fused fast decoder, which re-lays the weights of a model that is still being trained.

pass@k samples n >= k replies per problem (temperature > 0, seeded) and counts the c that verify; the
chance that at least one of k replies drawn from those n is right is estimated without bias as

    pass@k = 1 - C(n - c, k) / C(n, k)

averaged over problems (Chen et al. 2021, "Evaluating Large Language Models Trained on Code").
"""

from __future__ import annotations

import math
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import Any

import torch
from torch import nn

from tinylm.inference.engine import Engine
from tinylm.inference.sampling import SamplingParams
from tinylm.inference.tool_loop import ToolRun, run_with_tools
from tinylm.tasks.task import Example, Task
from tinylm.tokenizer.chat_format import ChatFormat
from tinylm.tools.registry import get_tools

GREEDY = SamplingParams(temperature=0.0)


@dataclass
class ExactMatch:
    correct: int
    total: int
    samples: list[tuple[str, str, bool]] = field(default_factory=list)  # (prompt, response, verified)
    verdicts: list[bool] = field(default_factory=list)  # every problem's, in order

    @property
    def accuracy(self) -> float:
        return self.correct / self.total if self.total else 0.0


def generate_replies(model: nn.Module, chat: ChatFormat, prompts: Sequence[list[dict[str, Any]]], max_new_tokens: int,
                     sampling: SamplingParams = GREEDY, seed: int = 0, batch_size: int = 64,
                     tools: Sequence[str] = ()) -> list[str]:
    """One reply text per prompt conversation, in order; with `tools`, the final answer after the tool loop."""
    if tools:
        return [run.final for run in tool_runs(model, chat, prompts, tools, max_new_tokens, sampling, seed,
                                               batch_size)]
    window = model.config.context_length
    replies: list[str] = []
    with _engine(model) as engine:
        for first in range(0, len(prompts), batch_size):
            ids = [chat.prompt_ids(p)[-(window - 1):] for p in prompts[first:first + batch_size]]
            limit = [max(1, min(max_new_tokens, window - len(p))) for p in ids]
            new = engine.generate(ids, limit, sampling, seed=seed + first, stop_ids=chat.stop_ids)
            replies += [chat.tokenizer.decode(tokens) for tokens in new]
    return replies


def tool_runs(model: nn.Module, chat: ChatFormat, prompts: Sequence[list[dict[str, Any]]], tools: Sequence[str],
              max_new_tokens: int, sampling: SamplingParams = GREEDY, seed: int = 0,
              batch_size: int = 64) -> list[ToolRun]:
    """Every prompt conversation through the tool loop with the built-in `tools`: its calls, results and answer."""
    runs: list[ToolRun] = []
    named = get_tools(list(tools))
    with _engine(model) as engine:
        for first in range(0, len(prompts), batch_size):
            def generate(ids: list[list[int]], limits: list[int], _rows: list[int],
                         _seed: int = seed + first) -> list[list[int]]:
                return engine.generate(ids, limits, sampling, seed=_seed, stop_ids=chat.stop_ids)

            runs += run_with_tools(generate, chat, prompts[first:first + batch_size], named, max_new_tokens,
                                   model.config.context_length)
    return runs


@contextmanager
def _engine(model: nn.Module) -> Iterator[Engine]:
    """A KV-cache engine on `model`, which is put back in training mode after if it was in it."""
    was_training = model.training  # before the engine, which puts the model in eval mode
    try:
        yield Engine(model, fast=False, keep=model.config.context_length)
    finally:
        model.train(was_training)


@torch.no_grad()
def exact_match(model: nn.Module, chat: ChatFormat, task: Task, examples: Sequence[Example], max_new_tokens: int,
                keep_samples: int = 3) -> ExactMatch:
    """How many of `examples` the model answers so that `task.verify` accepts the reply.

    The budget is at least `task.reply_tokens`: a reply with written-out working (builtin:addition)
    cut off before its answer would score the budget, not the model.
    """
    replies = generate_replies(model, chat, [e.prompt for e in examples], max(max_new_tokens, task.reply_tokens),
                               tools=task.tools)
    verdicts = [task.verify(reply, example) for reply, example in zip(replies, examples, strict=True)]
    samples = [(e.prompt[-1]["content"], r, v) for e, r, v in zip(examples, replies, verdicts)][:keep_samples]
    return ExactMatch(sum(verdicts), len(examples), samples, verdicts)


@dataclass
class PassAtK:
    k: int
    samples_per_problem: int
    score: float  # mean over problems of the unbiased estimate
    correct: list[int]  # per problem: how many of its samples verified


def pass_at_k_estimate(n: int, c: int, k: int) -> float:
    """Unbiased pass@k from n samples of which c are correct."""
    if not 0 <= c <= n or not 1 <= k <= n:
        raise ValueError(f"pass@k needs 0 <= c <= n and 1 <= k <= n, got n={n}, c={c}, k={k}")
    if n - c < k:
        return 1.0
    return 1.0 - math.comb(n - c, k) / math.comb(n, k)


@torch.no_grad()
def pass_at_k(model: nn.Module, chat: ChatFormat, task: Task, examples: Sequence[Example], max_new_tokens: int,
              k: int, samples: int, temperature: float = 0.8, seed: int = 0) -> PassAtK:
    """pass@k with `samples` sampled replies per problem (the same replies for the same seed)."""
    if samples < k:
        raise ValueError(f"pass@{k} needs at least {k} samples per problem, got {samples}")
    prompts = [e.prompt for e in examples for _ in range(samples)]
    replies = generate_replies(model, chat, prompts, max(max_new_tokens, task.reply_tokens),
                               SamplingParams(temperature=temperature),
                               seed=seed, tools=task.tools)
    correct = [sum(task.verify(replies[i * samples + j], e) for j in range(samples)) for i, e in enumerate(examples)]
    score = sum(pass_at_k_estimate(samples, c, k) for c in correct) / len(examples) if examples else 0.0
    return PassAtK(k, samples, score, correct)
