"""The running batch: requests in rows of one forward pass, each with its own length, joining and leaving.

Three kinds share one interface, so the scheduler never asks which model it drives:

- `FastBatch` (modern models `FastDecoder` computes exactly): `CachedBatch`'s scheme on the lean
  decode forward and its cache layout, what `tinylm generate` decodes with;
- `CachedBatch` (modern models): a prompt is prefilled alone, chunk by chunk, into its own small
  cache; when done it is copied into a free row of the shared `SlotCache`, and from then on each
  decode step feeds every row's newest token in one batched forward pass.
- `RecomputeBatch` (the classic model has no KV cache): each decode step re-reads every row's whole
  context, left-padded to the longest, in one batched forward pass.

A prompt computed alone and a row whose padding is masked give each request the tokens it would get
running alone (batch invariance), whatever else is in the batch.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field

import torch
from torch import nn

from tinylm.inference.fast_decode import FastDecoder, supports_fast_decode
from tinylm.models.modern.kv_cache import KVCache
from tinylm.serve.slot_cache import RightAlignedRows, SlotCache


@dataclass
class Prefill:
    """A prompt on its way into the batch: `done` of its tokens are computed so far."""

    ids: list[int]
    keep_all_logits: bool = False  # echo + logprobs: the logits at every prompt position are needed
    done: int = 0
    cache: KVCache | FastDecoder | None = None
    logits: list[torch.Tensor] = field(default_factory=list)  # [T, vocab] chunks (or just the last row)

    @property
    def finished(self) -> bool:
        return self.done == len(self.ids)

    def keep(self, hidden: torch.Tensor, head: Callable[[torch.Tensor], torch.Tensor]) -> None:
        """Keep the logits of this chunk's hidden states [T, n_embed]: all of them, or only the newest."""
        self.keep_logits(head(hidden if self.keep_all_logits else hidden[-1:]).float())

    def keep_logits(self, logits: torch.Tensor) -> None:
        """Keep this chunk's logits [T or 1, vocab] (already only the newest when not all are wanted)."""
        if not self.keep_all_logits:
            self.logits.clear()
            logits = logits[-1:]
        self.logits.append(logits)

    def last_logits(self) -> torch.Tensor:
        return self.logits[-1][-1]

    def all_logits(self) -> torch.Tensor:
        return torch.cat(self.logits)


class CachedBatch:
    def __init__(self, model: nn.Module, max_rows: int) -> None:
        self.model = model
        self.window = model.config.context_length
        self.cache = SlotCache(model, max_rows, 2 * self.window)
        self.device = next(model.parameters()).device

    @property
    def rows(self) -> int:
        return self.cache.rows

    def prefill(self, job: Prefill, budget: int) -> int:
        """Compute up to `budget` more prompt tokens of `job` alone; how many were computed."""
        if job.cache is None:
            job.cache = self.model.new_cache(1, len(job.ids))
        chunk = job.ids[job.done : job.done + max(1, budget)]
        idx = torch.tensor([chunk], dtype=torch.long, device=self.device)
        job.keep(self.model.forward_hidden(idx, job.cache)[0], self.model.logits)
        job.done += len(chunk)
        return len(chunk)

    def join(self, job: Prefill) -> int:
        """Copy the prefilled prompt into a new row (the prefill stays whole: several rows may share it)."""
        return self.cache.join_cache(job.cache, len(job.ids))

    def decode(self, tokens: torch.Tensor) -> torch.Tensor:
        """Feed each row's newest token [rows]; next-token logits [rows, vocab]."""
        self.cache.make_room(1)
        hidden = self.model.forward_hidden(tokens[:, None], self.cache, self.cache.positions())
        return self.model.logits(hidden[:, -1]).float()

    def leave(self, row: int) -> None:
        self.cache.leave(row)


class RecomputeBatch:
    def __init__(self, model: nn.Module) -> None:
        self.model = model
        self.window = model.config.context_length
        self.device = next(model.parameters()).device
        self.contexts: list[list[int]] = []

    @property
    def rows(self) -> int:
        return len(self.contexts)

    def prefill(self, job: Prefill, budget: int) -> int:
        """The whole prompt in one pass (without a cache there is nothing to carry between chunks)."""
        idx = torch.tensor([job.ids], dtype=torch.long, device=self.device)
        job.keep(self.model.forward_hidden(idx)[0], self.model.logits)
        job.done = len(job.ids)
        return job.done

    def join(self, job: Prefill) -> int:
        self.contexts.append(list(job.ids))
        return len(self.contexts) - 1

    def decode(self, tokens: torch.Tensor) -> torch.Tensor:
        for context, token in zip(self.contexts, tokens.tolist(), strict=True):
            context.append(int(token))
        longest = max(len(c) for c in self.contexts)
        idx = torch.zeros(self.rows, longest, dtype=torch.long, device=self.device)
        positions = torch.zeros_like(idx)
        valid = torch.zeros(self.rows, longest, dtype=torch.bool, device=self.device)
        for i, context in enumerate(self.contexts):
            pad = longest - len(context)
            idx[i, pad:] = torch.tensor(context, device=self.device)
            positions[i, pad:] = torch.arange(len(context), device=self.device)
            valid[i, pad:] = True
        hidden = self.model.forward_hidden(idx, positions=positions, valid=valid)
        return self.model.logits(hidden[:, -1]).float()

    def leave(self, row: int) -> None:
        last = self.contexts.pop()
        if row < len(self.contexts):
            self.contexts[row] = last


class FastBatch:
    """`CachedBatch` on the lean forward of `FastDecoder` (modern models it computes exactly).

    The same right-aligned rows as `SlotCache` (`RightAlignedRows` keeps them), in the decoder's own
    [rows, kv_heads, slots, head_dim] cache: a prompt is prefilled alone into a one-row decoder sharing the
    fused weights, then copied into the columns just before the shared end; a leaving row is overwritten
    by the last one. At one row a decode step costs what `tinylm generate` pays per token, not the
    module-by-module forward's.
    """

    def __init__(self, model: nn.Module, max_rows: int) -> None:
        self.window = model.config.context_length
        capacity = 2 * self.window  # a window of steps between two left shifts
        self.decoder = FastDecoder(model, max_rows, capacity)
        self.decoder.padded = True  # rows start at different columns: attention always reads the mask
        self.device = self.decoder.device
        self.slots = RightAlignedRows(_slot_major(self.decoder), self.decoder.valid, capacity)

    @property
    def rows(self) -> int:
        return self.slots.rows

    def prefill(self, job: Prefill, budget: int) -> int:
        if job.cache is None:
            job.cache = FastDecoder.sharing(self.decoder, 1, len(job.ids))
        chunk = job.ids[job.done : job.done + max(1, budget)]
        idx = torch.tensor([chunk], dtype=torch.long, device=self.device)
        job.keep_logits(job.cache.extend(idx, last_only=not job.keep_all_logits)[0].float())
        job.done += len(chunk)
        return len(chunk)

    def join(self, job: Prefill) -> int:
        return self.slots.join(_slot_major(job.cache), len(job.ids))

    def decode(self, tokens: torch.Tensor) -> torch.Tensor:
        self.slots.make_room(1)
        self.decoder.length = self.slots.length  # the decoder writes at the rows' shared end column
        first = self.slots.shared_start()  # rows that joined together need no padding mask
        if first is not None:
            logits = self.decoder.extend(tokens[:, None], first_key=first)[:, -1].float()
        else:
            logits = self.decoder.extend(tokens[:, None], self.slots.positions())[:, -1].float()
        self.slots.length = self.decoder.length
        return logits

    def leave(self, row: int) -> None:
        self.slots.leave(row)


def _slot_major(decoder: FastDecoder) -> list[torch.Tensor]:
    """The decoder's keys and values [rows, kv_heads, slots, head_dim] as views [rows, slots, kv_heads, head_dim]."""
    return [buffer.transpose(1, 2) for buffer in (*decoder.keys, *decoder.values)]


def make_batch(model: nn.Module, max_rows: int) -> FastBatch | CachedBatch | RecomputeBatch:
    """The lean cached batch where `FastDecoder` computes the model exactly, the model's own cached path for
    the other modern models (MLA), recomputation for the classic model (no KV cache)."""
    if supports_fast_decode(model):
        return FastBatch(model, max_rows)
    return CachedBatch(model, max_rows) if hasattr(model, "new_cache") else RecomputeBatch(model)
