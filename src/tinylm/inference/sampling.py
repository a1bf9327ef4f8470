"""Turning next-token logits into a token: greedy, temperature, top-k, top-p, min-p, repetition penalty.

Every filter works on a batch of logits [B, vocab] on the model's device and only ever sets logits to
-inf, so they compose in any combination. They run in the order `transformers` uses:

    repetition penalty -> temperature -> top-k -> top-p -> min-p -> sample

- repetition penalty r (CTRL, Keskar et al. 2019): a token already in the sequence has its logit
  divided by r when positive and multiplied by r when negative, so r > 1 always makes it less likely.
- temperature T: logits / T. T -> 0 is greedy (argmax), and `temperature=0` means exactly that.
- top-k: keep the k largest logits.
- top-p (nucleus, Holtzman et al. 2019): keep the smallest set of most likely tokens whose
  probabilities sum to at least p (the most likely token always stays).
- min-p: keep tokens whose probability is at least p times the most likely token's.

Sampling draws from a `torch.Generator` owned by the caller, so a seed reproduces a run exactly and
generation never disturbs the global RNG. Nothing here reads a tensor back to the CPU.

Seeded sequences (RL rollouts, the server's requests) draw by inverse CDF instead: each sequence owns
float64 uniforms made from its seed before decoding (`sequence_uniforms`), and step t takes the first
token whose cumulative probability passes u_t. A sequence's tokens then depend on its seed and the
logits alone, not on its neighbours in a batch, so the server and the trainer draw the same rollout.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass

import torch

from tinylm.errors import TinyLMError


def check_sampling_options(temperature: float, top_k: int | None, top_p: float | None = None,
                           min_p: float | None = None) -> None:
    """Refuse, in one line, sampling options that cannot sample: called before any work that would need them."""
    if not (math.isfinite(temperature) and temperature >= 0):
        raise TinyLMError(f"temperature must be >= 0 and finite (0 = greedy), got {temperature}")
    if top_k is not None and top_k < 1:
        raise TinyLMError(f"top_k must be >= 1, got {top_k}")
    if top_p is not None and not 0 < top_p <= 1:
        raise TinyLMError(f"top_p must be in (0, 1], got {top_p}")
    if min_p is not None and not 0 <= min_p <= 1:
        raise TinyLMError(f"min_p must be in [0, 1], got {min_p}")


@dataclass(frozen=True)
class SamplingParams:
    """How to pick each next token; the defaults sample from the model's own distribution."""

    temperature: float = 1.0
    top_k: int | None = None
    top_p: float | None = None
    min_p: float | None = None
    repetition_penalty: float = 1.0

    def __post_init__(self) -> None:
        check_sampling_options(self.temperature, self.top_k, self.top_p, self.min_p)
        if not (math.isfinite(self.repetition_penalty) and self.repetition_penalty > 0):
            raise TinyLMError(f"repetition_penalty must be > 0 and finite (1 = off), got {self.repetition_penalty}")

    @property
    def greedy(self) -> bool:
        return self.temperature == 0

    @property
    def needs_history(self) -> bool:
        return self.repetition_penalty != 1.0


GREEDY = SamplingParams(temperature=0.0)


def apply_repetition_penalty(logits: torch.Tensor, seen: torch.Tensor, penalty: float) -> torch.Tensor:
    """Penalize tokens marked in `seen` [B, vocab] (bool): logit / r if positive, logit * r otherwise."""
    penalized = torch.where(logits > 0, logits / penalty, logits * penalty)
    return torch.where(seen, penalized, logits)


def top_k_filter(logits: torch.Tensor, k: int) -> torch.Tensor:
    if k >= logits.shape[-1]:
        return logits
    kth = torch.topk(logits, k, dim=-1).values[..., -1:]
    return logits.masked_fill(logits < kth, float("-inf"))


def top_p_filter(logits: torch.Tensor, p: float) -> torch.Tensor:
    """Keep the most likely tokens until their total probability reaches p."""
    if p >= 1.0:
        return logits
    sorted_logits, order = torch.sort(logits, dim=-1, descending=True)
    probs = torch.softmax(sorted_logits, dim=-1)
    mass_before = probs.cumsum(dim=-1) - probs  # probability of the strictly more likely tokens
    drop_sorted = mass_before >= p  # already reached p without this token; the first token never drops
    drop = torch.zeros_like(drop_sorted).scatter(-1, order, drop_sorted)
    return logits.masked_fill(drop, float("-inf"))


def min_p_filter(logits: torch.Tensor, p: float) -> torch.Tensor:
    """Keep tokens at least p times as likely as the most likely one."""
    probs = torch.softmax(logits, dim=-1)
    threshold = p * probs.amax(dim=-1, keepdim=True)
    return logits.masked_fill(probs < threshold, float("-inf"))


def process_logits(logits: torch.Tensor, params: SamplingParams, seen: torch.Tensor | None = None) -> torch.Tensor:
    """All filters of `params` applied to float32 logits [B, vocab]; the result is what `sample` draws from."""
    logits = logits.float()
    if params.needs_history and seen is not None:
        logits = apply_repetition_penalty(logits, seen, params.repetition_penalty)
    if params.greedy:
        return logits
    if params.temperature != 1.0:
        logits = logits / params.temperature
    if params.top_k is not None:
        logits = top_k_filter(logits, params.top_k)
    if params.top_p is not None:
        logits = top_p_filter(logits, params.top_p)
    if params.min_p is not None and params.min_p > 0:
        logits = min_p_filter(logits, params.min_p)
    return logits


def probabilities(logits: torch.Tensor, params: SamplingParams, seen: torch.Tensor | None = None) -> torch.Tensor:
    """The distribution [B, vocab] that `sample` draws from (one-hot at the argmax when greedy)."""
    processed = process_logits(logits, params, seen)
    if params.greedy:
        return torch.nn.functional.one_hot(processed.argmax(dim=-1), processed.shape[-1]).float()
    return torch.softmax(processed, dim=-1)


def sample(
    logits: torch.Tensor,
    params: SamplingParams,
    generator: torch.Generator | None = None,
    seen: torch.Tensor | None = None,
) -> torch.Tensor:
    """Next token ids [B] (long, on the logits' device) for logits [B, vocab]."""
    processed = process_logits(logits, params, seen)
    if params.greedy:
        return processed.argmax(dim=-1)
    probs = torch.softmax(processed, dim=-1)
    return torch.multinomial(probs, 1, generator=generator).squeeze(-1)


def sequence_uniforms(seeds: Sequence[int], steps: int, device: torch.device | str = "cpu") -> torch.Tensor:
    """[len(seeds), steps] float64 uniforms, row i from seed i (mod 2**63).

    torch's CPU generator yields a prefix of the same stream whatever `steps` is, so a caller that
    asks for fewer steps sees the first of the same numbers.
    """
    rows = [torch.rand(steps, generator=torch.Generator().manual_seed(int(s) % 2**63), dtype=torch.float64)
            for s in seeds]
    return torch.stack(rows).to(device)


def inverse_cdf_sample(probs: torch.Tensor, uniform: torch.Tensor) -> torch.Tensor:
    """Token ids [B]: the first index whose cumulative probability exceeds u * total (never a zero-prob token)."""
    cdf = probs.double().cumsum(-1)
    target = (uniform * cdf[:, -1]).unsqueeze(-1)
    return torch.searchsorted(cdf, target, right=True).squeeze(-1).clamp(max=probs.shape[-1] - 1)
