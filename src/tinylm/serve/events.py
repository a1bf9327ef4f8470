"""What the scheduler tells a request's handler, in order: prompt log-probs, tokens, then one ending."""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class Token:
    """One new token; `logprob` and `top` ([(id, logprob)], most likely first) only when asked for.

    A stop token (`stop=True`) is generated and counted like any other (usage, log-probs: lm-eval reads the
    last log-prob as the generated token's), but it is never part of the text.
    """

    id: int
    logprob: float | None = None
    top: tuple[tuple[int, float], ...] = ()
    stop: bool = False


@dataclass(frozen=True)
class PromptLogprobs:
    """log p(prompt[i] | prompt[:i]) for i >= 1 with the top alternatives at each position (echo)."""

    logprobs: tuple[float, ...]
    top: tuple[tuple[tuple[int, float], ...], ...]


@dataclass(frozen=True)
class Finished:
    """The end of a generation: "stop" (a stop token), "length" (max_tokens or the window), "cancelled"."""

    reason: str


@dataclass(frozen=True)
class Failed:
    """The engine raised while serving this request; the server goes on with the others."""

    message: str


Event = Token | PromptLogprobs | Finished | Failed
