"""Reward sources for RL, chosen by `--reward SPEC`; each scores a batch of (response text, example).

    exact                 1 if the task's verifier accepts the response, else 0 (the default)
    exact+format          exact, plus `FORMAT_BONUS` when the response has the task's answer format
    python                run the response as a Python program in the sandbox; 1 if what it prints is the answer
    model:PATH            a reward model trained by `tinylm reward` (stages/preference/reward.py, reward_model.py)
    module:function       your own `function(response: str, example: Example) -> float` (user_reward.py:
    file.py:function      a module of the working folder, or a file)
    none                  0 for every response: the score is then only what shapes it (--teacher's KL)

A per-sample reward is called in a worker thread with a deadline (`reward_calls.py`), so a hung one
fails or is abandoned on Ctrl-C instead of hanging the run. A sample whose reward raises, returns a
non-number or NaN/inf, or runs past the timeout has failed. With `errors="stop"` (`--reward-errors`,
the default) the first failure is an error naming the reward, what it did and the sample: a reward
that fails on every sample must not train a whole run on zeros and exit 0. With `errors="zero"` it
scores 0 and `score` counts it and keeps the first message, for the log and the closing line.
"""

from __future__ import annotations

import ast
import contextlib
import math
import re
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass
from typing import Any

import torch

from tinylm.errors import TinyLMError
from tinylm.sandbox import run_python
from tinylm.stages.preference.reward import load_reward_model
from tinylm.stages.rl.reward_calls import RewardsInterrupted, RewardTimeout, call_each, never
from tinylm.stages.rl.user_reward import load_user_function
from tinylm.tasks.task import Example, Task
from tinylm.tokenizer.chat_format import ChatFormat

__all__ = ["FORMAT_BONUS", "REWARD_ERRORS", "Reward", "RewardsInterrupted", "Scores", "has_answer_format",
           "load_reward"]

FORMAT_BONUS = 0.1
REWARD_ERRORS = ("stop", "zero")  # what a failed sample does: stop the run, or score 0 and be counted
SampleReward = Callable[[str, Example], float]
_INTEGER_ONLY = re.compile(r"\s*-?\d+\s*")


@dataclass
class Scores:
    rewards: list[float]
    failures: int  # samples whose reward failed (scored 0; only with errors="zero")
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


def problem_of(value: Any) -> str | None:
    """What is wrong with a reward's value ("raised ValueError: ..."), or None for a finite number."""
    if isinstance(value, RewardTimeout):
        return str(value)
    if isinstance(value, BaseException):
        text = str(value).splitlines()[0] if str(value) else ""
        return f"raised {type(value).__name__}" + (f": {text}" if text else "")
    try:
        number = float(value)
    except (TypeError, ValueError):
        return f"returned {repr(value)[:60]}, not a number"
    return None if math.isfinite(number) else f"returned {number}"


class Reward:
    """Scores responses one by one with a per-sample function (subclasses may score a batch at once)."""

    def __init__(self, name: str, fn: SampleReward, timeout: float | None = None, errors: str = "stop") -> None:
        if errors not in REWARD_ERRORS:
            raise TinyLMError(f"--reward-errors {errors!r}: choose {' or '.join(REWARD_ERRORS)}")
        self.name, self.fn, self.timeout, self.errors = name, fn, timeout, errors

    def batch(self, responses: Sequence[str], examples: Sequence[Example],
              should_stop: Callable[[], bool] = never) -> Iterator[Any]:
        """Each sample's value (or the exception it raised), in order; RewardsInterrupted once a stop is asked."""
        yield from call_each(self.fn, list(zip(responses, examples, strict=True)), self.timeout, should_stop)

    def score(self, responses: Sequence[str], examples: Sequence[Example],
              should_stop: Callable[[], bool] = never) -> Scores:
        rewards: list[float] = []
        failures, first = 0, None
        with contextlib.closing(self.batch(responses, examples, should_stop)) as values:
            for index, value in enumerate(values):
                problem = problem_of(value)
                if problem is None:
                    rewards.append(float(value))
                    continue
                message = f"reward {self.name} {problem} on sample {index}"
                if self.errors == "stop":
                    raise TinyLMError(f"{message} (--reward-errors zero scores such samples 0 instead)")
                failures += 1
                first = first or message
                rewards.append(0.0)
        return Scores(rewards, failures, first)


def python_output_reward(timeout: float = 2.0) -> SampleReward:
    """1 when the response, run as a Python program in the sandbox, prints exactly the answer."""
    def reward(response: str, example: Example) -> float:
        result = run_python(response, timeout=timeout)
        return float(result.ok and result.stdout.strip() == example.answer.strip())

    return reward


def _reward_model(path: str, device: Any, errors: str) -> Reward:
    """A `tinylm reward` checkpoint scoring prompt + response, rendered with its own chat format."""
    model, tokenizer, _ = load_reward_model(path)
    if tokenizer is None:
        raise TinyLMError(f"--reward model:{path}: the reward model has no tokenizer.json")
    chat = ChatFormat.from_tokenizer(tokenizer)
    model.to(device or "cpu")
    window = model.config.context_length

    class ModelReward(Reward):
        @torch.no_grad()
        def batch(self, responses: Sequence[str], examples: Sequence[Example],
                  should_stop: Callable[[], bool] = never) -> Iterator[Any]:
            rows = [chat.render([*e.prompt, {"role": "assistant", "content": r}]).ids[-window:]
                    for r, e in zip(responses, examples, strict=True)]
            lengths = torch.tensor([len(r) for r in rows])
            ids = torch.zeros(len(rows), int(lengths.max()), dtype=torch.long)
            for i, row in enumerate(rows):
                ids[i, :len(row)] = torch.tensor(row)
            device_ = next(model.parameters()).device
            yield from model(ids.to(device_), lengths.to(device_)).tolist()  # one forward: fast, on the device

    return ModelReward(f"model:{path}", lambda r, e: 0.0, errors=errors)


def load_reward(spec: str, task: Task, device: Any = None, *, timeout: float | None = None,
                errors: str = "stop") -> Reward:
    """The reward `spec` names (see the module docstring), for `task`; `timeout` seconds per sample's call."""
    if spec == "exact":
        return Reward("exact", lambda r, e: float(task.verify(r, e)), timeout, errors)
    if spec == "exact+format":
        return Reward("exact+format",
                      lambda r, e: float(task.verify(r, e)) + FORMAT_BONUS * has_answer_format(r, task), timeout,
                      errors)
    if spec == "none":
        return Reward("none", lambda r, e: 0.0, timeout, errors)
    if spec == "python":
        return Reward("python", python_output_reward(), timeout, errors)
    if spec.startswith("model:"):
        return _reward_model(spec.removeprefix("model:"), device, errors)
    if ":" in spec:
        return Reward(spec, load_user_function(spec), timeout, errors)
    if spec.endswith(".py"):
        raise TinyLMError(f"--reward {spec}: name the function too: {spec}:FUNCTION")
    raise TinyLMError(f"unknown --reward {spec!r}: use exact, exact+format, python, model:PATH, module:function, "
                      "file.py:function or none")
