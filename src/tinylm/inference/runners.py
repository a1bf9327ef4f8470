"""Runners: one small interface over the three ways a model can continue a batch of sequences.

    runner.extend(idx [B, T], positions=None, valid=None, last_only=True) -> logits [B, 1 or T, vocab]
    runner.length, runner.capacity, runner.truncate(n), runner.reset()

- `FastDecoder` (fast_decode.py): KV cache + a lean forward, for the modern models whose every feature
  it handles (fast_decode_support.py); `runner_choice` names the feature when it declines one.
- `ModelCacheRunner`: the model's own `forward_hidden` with its `KVCache` (every modern variant, MLA too).
- `RecomputeRunner`: no cache at all; every call re-reads everything so far. The classic model works
  this way, and so does `use_cache=False`, the reference that cached decoding must match.

`positions` [B, T] are each sequence's own positions (default: the slot index) and `valid` [B, T]
marks real tokens (False = left padding), so prompts of different lengths share one batch.
The engine and speculative decoding only ever talk to this interface.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Protocol

import torch
from torch import nn

from tinylm.inference.fast_decode import FastDecoder, refusal


class Runner(Protocol):
    length: int
    capacity: int

    def extend(self, idx: torch.Tensor, positions: torch.Tensor | None = None,
               valid: torch.Tensor | None = None, last_only: bool = True) -> torch.Tensor: ...

    def truncate(self, length: int) -> None: ...

    def reset(self) -> None: ...


class ModelCacheRunner:
    """The model's generic cached path: `forward_hidden` with a preallocated `KVCache`."""

    def __init__(self, model: nn.Module, batch_size: int, capacity: int | None = None) -> None:
        self.model = model
        self.capacity = capacity or model.config.context_length
        self.cache = model.new_cache(batch_size, self.capacity)

    @property
    def length(self) -> int:
        return self.cache.length

    def extend(self, idx: torch.Tensor, positions: torch.Tensor | None = None,
               valid: torch.Tensor | None = None, last_only: bool = True) -> torch.Tensor:
        hidden = self.model.forward_hidden(idx, self.cache, positions, valid)
        return self.model.logits(hidden[:, -1:] if last_only else hidden)

    def truncate(self, length: int) -> None:
        self.cache.truncate(length)

    def reset(self) -> None:
        self.cache.reset()


class RecomputeRunner:
    """No cache: keep the tokens, positions and padding seen so far and run the whole prefix each call."""

    def __init__(self, model: nn.Module, batch_size: int, capacity: int | None = None) -> None:
        self.model = model
        self.capacity = capacity or model.config.context_length
        device = next(model.parameters()).device
        self.tokens = torch.zeros(batch_size, self.capacity, dtype=torch.long, device=device)
        self.positions = torch.zeros(batch_size, self.capacity, dtype=torch.long, device=device)
        self.valid = torch.ones(batch_size, self.capacity, dtype=torch.bool, device=device)
        self.slots = torch.arange(self.capacity, device=device)
        self.length = 0
        self.padded = False

    def extend(self, idx: torch.Tensor, positions: torch.Tensor | None = None,
               valid: torch.Tensor | None = None, last_only: bool = True) -> torch.Tensor:
        start, end = self.length, self.length + idx.shape[1]
        if end > self.capacity:
            raise ValueError(f"context full: {start} + {idx.shape[1]} tokens > capacity {self.capacity}")
        self.tokens[:, start:end] = idx
        self.positions[:, start:end] = self.slots[start:end] if positions is None else positions
        self.valid[:, start:end] = True if valid is None else valid
        self.padded = self.padded or valid is not None
        self.length = end
        hidden = self.model.forward_hidden(
            self.tokens[:, :end], positions=self.positions[:, :end], valid=self.valid[:, :end] if self.padded else None
        )
        return self.model.logits(hidden[:, -1:] if last_only else hidden[:, start:end])

    def truncate(self, length: int) -> None:
        if not 0 <= length <= self.length:
            raise ValueError(f"cannot truncate a context of length {self.length} to {length}")
        self.length = length

    def reset(self) -> None:
        self.length = 0
        self.padded = False


RunnerFactory = Callable[[nn.Module, int, int | None], Runner]  # (model, batch_size, capacity) -> runner


def runner_choice(model: nn.Module, use_cache: bool = True, fast: bool = True) -> tuple[RunnerFactory, str]:
    """(the runner `make_runner` builds, one line saying which decode path that is and why), for callers to print."""
    if not use_cache:
        return RecomputeRunner, "uncached: every step re-reads the whole context (use_cache=False)"
    if not hasattr(model, "new_cache"):
        return RecomputeRunner, "uncached: every step re-reads the whole context (the model has no KV cache)"
    if not fast:
        return ModelCacheRunner, "the model's own forward with its KV cache (fast=False)"
    reason = refusal(model)
    if reason is not None:
        return ModelCacheRunner, f"the model's own forward with its KV cache: {reason}"
    return FastDecoder, "the fast decoder (fast_decode.py) with its KV cache"


def make_runner(model: nn.Module, batch_size: int, capacity: int | None = None, use_cache: bool = True,
                fast: bool = True, rows_per_call: int = 1) -> Runner:
    """The fastest runner the model supports (or the uncached reference when use_cache=False). `rows_per_call`:
    the tokens a typical `extend` brings, which the fast decoder lays its weights out for (`packed_float.py`)."""
    factory, _ = runner_choice(model, use_cache, fast)
    if factory is FastDecoder:
        return FastDecoder(model, batch_size, capacity, rows_per_call)
    return factory(model, batch_size, capacity)
