"""What every task gives: examples as chat messages, a held-out split, a verifier, and (if it can) wrong answers.

The split is decided by a stable hash of the problem itself (blake2b of its key, e.g. "123+456"),
never by the seed or by a position in a list, so the train and test problems are disjoint sets
whatever n and seed are asked for, on every machine and Python version.
"""

from __future__ import annotations

import hashlib
from abc import ABC, abstractmethod
from dataclasses import dataclass
from typing import Any, Literal

from tinylm.errors import TinyLMError

Split = Literal["train", "test"]
SPLITS: tuple[str, ...] = ("train", "test")
TEST_SHARE = 0.1  # share of all problems held out for evaluation


def split_of(key: str) -> Split:
    """'test' for about TEST_SHARE of all problem keys, 'train' for the rest; a fixed function of the key."""
    digest = hashlib.blake2b(key.encode("utf-8"), digest_size=8).digest()
    return "test" if int.from_bytes(digest, "big") < TEST_SHARE * 2**64 else "train"


def check_split(split: str) -> Split:
    if split not in SPLITS:
        raise TinyLMError(f"unknown split {split!r}: choose 'train' or 'test'")
    return split  # type: ignore[return-value]


@dataclass(frozen=True)
class Example:
    """One problem as a conversation: the user's prompt and the reference assistant answer."""

    key: str  # identifies the problem; decides its split
    messages: tuple[dict[str, Any], ...]  # ({"role": "user", ...}, {"role": "assistant", ...})
    answer: str  # the reference string a verifier compares against
    prompt_turns: int | None = None  # how many messages the prompt is, when the reference is more than one turn

    @property
    def prompt(self) -> list[dict[str, Any]]:
        """What a model is asked: the messages before the reference answer (its tool calls and results included)."""
        return [dict(m) for m in self.messages[:self.prompt_turns if self.prompt_turns is not None else -1]]


def conversation(key: str, user: str, answer: str) -> Example:
    return Example(key, ({"role": "user", "content": user}, {"role": "assistant", "content": answer}), answer)


class Task(ABC):
    """A family of problems with one answer format, an exact verifier and, for preference pairs, its own mistakes."""

    name: str
    tools: tuple[str, ...] = ()  # the built-in tools its prompts declare, which evaluation and RL then run
    reply_tokens: int = 1  # the fewest new tokens a whole reference reply can need; evaluation never asks for fewer
    notes: tuple[str, ...] = ()  # on a file-based task's input, one line each (bytes that were not UTF-8), to say

    @abstractmethod
    def examples(self, split: str, n: int, seed: int = 0) -> list[Example]:
        """n distinct problems of `split` (fewer if the split has fewer), the same list for the same seed."""

    @abstractmethod
    def verify(self, response: str, example: Example) -> bool:
        """True when a model's response text answers the example exactly (after the task's normalisation)."""

    def wrong_answers(self, example: Example) -> dict[str, str]:
        """Plausible wrong answers to `example`, by kind of mistake, for the rejected side of preference pairs.

        Deterministic (no randomness: the pairer draws which one to use), each written as
        `preferred_answer` writes the right one. The pairer drops any that is empty, equal to the
        preferred answer or accepted by `verify`, so a mutation that happens to stay right does no harm.
        A task that cannot make mistakes keeps this default and has no pairs.
        """
        raise TinyLMError(f"task {self.name!r} makes no wrong answers, so it has no preference pairs")

    def preferred_answer(self, example: Example) -> str:
        """The chosen side of a pair: the reference, in the layout of `wrong_answers` (formatting is no tell)."""
        return example.answer
