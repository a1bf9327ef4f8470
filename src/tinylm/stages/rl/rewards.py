"""Reward sources for RL, chosen by `--reward SPEC`; each scores a batch of (response text, example).

    exact            1 if the task's verifier accepts the response, else 0 (the default)
    exact+format     exact, plus `FORMAT_BONUS` when the response has the task's answer format
    python           run the response as a Python program in the sandbox; 1 if what it prints is the answer
    model:PATH       a reward model trained by `tinylm reward` (stages/preference/reward.py, reward_model.py)
    module:function  your own `function(response: str, example: Example) -> float`

A reward that raises or returns NaN/inf scores that sample 0; `score` counts such samples and keeps
the first message, so the stage can log them instead of stopping a long run.
"""

from __future__ import annotations

import ast
import importlib
import math
import re
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

import torch

from tinylm.errors import TinyLMError
from tinylm.stages.preference.reward import load_reward_model
from tinylm.tasks.sandbox import run_python
from tinylm.tasks.task import Example, Task
from tinylm.tokenizer.chat_format import ChatFormat

FORMAT_BONUS = 0.1
SampleReward = Callable[[str, Example], float]
_INTEGER_ONLY = re.compile(r"\s*-?\d+\s*")


@dataclass
class Scores:
    rewards: list[float]
    failures: int  # samples whose reward raised or was not finite (scored 0)
    first_failure: str | None


def has_answer_format(response: str, task: Task) -> bool:
    """The task's answer format: a bare integer for arithmetic, Python source for code tasks."""
    if task.name == "arith":
        return bool(_INTEGER_ONLY.fullmatch(response))
    try:
        ast.parse(response)
    except SyntaxError:
        return False
    return True


class Reward:
    """Scores responses one by one with a per-sample function (subclasses may score a batch at once)."""

    def __init__(self, name: str, fn: SampleReward) -> None:
        self.name, self.fn = name, fn

    def batch(self, responses: Sequence[str], examples: Sequence[Example]) -> list[Any]:
        out: list[Any] = []
        for response, example in zip(responses, examples, strict=True):
            try:
                out.append(self.fn(response, example))
            except Exception as exc:  # noqa: BLE001 - a user's reward may fail in any way: score 0, count it
                out.append(exc)
        return out

    def score(self, responses: Sequence[str], examples: Sequence[Example]) -> Scores:
        rewards, failures, first = [], 0, None
        for value in self.batch(responses, examples):
            problem = None
            if isinstance(value, Exception):
                problem = f"{type(value).__name__}: {value}"
            else:
                try:
                    value = float(value)
                except (TypeError, ValueError):
                    problem = f"returned {value!r}, not a number"
                else:
                    if not math.isfinite(value):
                        problem = f"returned {value}"
            if problem is not None:
                failures += 1
                first = first or f"{self.name}: {problem}"
                value = 0.0
            rewards.append(value)
        return Scores(rewards, failures, first)


def python_output_reward(timeout: float = 2.0) -> SampleReward:
    """1 when the response, run as a Python program in the sandbox, prints exactly the answer."""
    def reward(response: str, example: Example) -> float:
        result = run_python(response, timeout=timeout)
        return float(result.ok and result.stdout.strip() == example.answer.strip())

    return reward


def _user_function(spec: str) -> SampleReward:
    module_name, _, function_name = spec.partition(":")
    try:
        module = importlib.import_module(module_name)
    except Exception as exc:  # noqa: BLE001 - any import failure is the user's module: one line
        raise TinyLMError(f"--reward {spec}: cannot import {module_name} ({type(exc).__name__}: {exc})") from None
    fn = getattr(module, function_name, None)
    if not callable(fn):
        raise TinyLMError(f"--reward {spec}: {module_name} has no function {function_name!r}")
    return fn


def _reward_model(path: str, device: Any) -> Reward:
    """A `tinylm reward` checkpoint scoring prompt + response, rendered with its own chat format."""
    model, tokenizer, _ = load_reward_model(path)
    if tokenizer is None:
        raise TinyLMError(f"--reward model:{path}: the reward model has no tokenizer.json")
    chat = ChatFormat.from_tokenizer(tokenizer)
    model.to(device or "cpu")
    window = model.config.context_length

    class ModelReward(Reward):
        @torch.no_grad()
        def batch(self, responses: Sequence[str], examples: Sequence[Example]) -> list[Any]:
            rows = [chat.render([*e.prompt, {"role": "assistant", "content": r}]).ids[-window:]
                    for r, e in zip(responses, examples, strict=True)]
            lengths = torch.tensor([len(r) for r in rows])
            ids = torch.zeros(len(rows), int(lengths.max()), dtype=torch.long)
            for i, row in enumerate(rows):
                ids[i, :len(row)] = torch.tensor(row)
            device_ = next(model.parameters()).device
            return model(ids.to(device_), lengths.to(device_)).tolist()

    return ModelReward(f"model:{path}", lambda r, e: 0.0)


def load_reward(spec: str, task: Task, device: Any = None) -> Reward:
    """The reward `spec` names (see the module docstring), for `task`."""
    if spec == "exact":
        return Reward("exact", lambda r, e: float(task.verify(r, e)))
    if spec == "exact+format":
        return Reward("exact+format",
                      lambda r, e: float(task.verify(r, e)) + FORMAT_BONUS * has_answer_format(r, task))
    if spec == "python":
        return Reward("python", python_output_reward())
    if spec.startswith("model:"):
        return _reward_model(spec.removeprefix("model:"), device)
    if ":" in spec:
        return Reward(spec, _user_function(spec))
    raise TinyLMError(f"unknown --reward {spec!r}: use exact, exact+format, python, model:PATH or module:function")
