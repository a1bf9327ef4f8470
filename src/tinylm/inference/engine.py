"""The generation engine: batched, streaming, past the context window, the same API for both models.

    engine = Engine(model)
    engine.generate([[1, 2, 3], [4]], max_new_tokens=20, sampling=GREEDY)   # -> list of new ids
    for token in engine.stream([1, 2, 3], max_new_tokens=20): ...           # ids as they come

How a batch is laid out. All sequences share one token buffer `seq` [B, slots]; shorter prompts are
left-padded, so every sequence writes its next token into the same slot and one forward pass serves
the whole batch. Each sequence carries its own positions (slot - its context start) and a validity
mask that hides the padding, which is what makes a batched result identical to generating each
prompt alone. A sequence stops at a stop token (EOT) or at its own `max_new_tokens`; finished ones
keep riding along until the whole batch is done, and their extra tokens are dropped.

The context window. A sequence's context is everything from its `context start` slot on. When one
more token would make it longer than the model's window W, its start jumps forward so that only the
last `keep` tokens (default W // 2) remain, and the runner re-encodes the batch into a fresh cache.
Re-encoding half the window at a time costs one prefill per W / 2 tokens instead of one per token.
The uncached runner follows exactly the same rule, so cached and uncached generation agree even past
the window; `keep = W` gives the classic sliding window (every step re-reads the last W tokens).

Speed. Everything runs under `torch.inference_mode`; the token buffer, the cache and the positions
are allocated once; sampling happens on the device; `generate` reads nothing back to the CPU except
a "is everyone done?" flag every `sync_every` steps. `stream` has to look at every token anyway.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator, Sequence

import torch
from torch import nn

from tinylm.inference.runners import Runner, make_runner
from tinylm.inference.sampling import SamplingParams, sample


class Engine:
    def __init__(self, model: nn.Module, *, use_cache: bool = True, fast: bool = True,
                 keep: int | None = None, sync_every: int = 16) -> None:
        self.model = model.eval()
        self.window = model.config.context_length
        self.keep = keep if keep is not None else max(1, self.window // 2)
        if not 1 <= self.keep <= self.window:
            raise ValueError(f"keep must be in [1, context_length={self.window}], got {self.keep}")
        self.use_cache, self.fast, self.sync_every = use_cache, fast, max(1, sync_every)
        self.device = next(model.parameters()).device
        self._runner: Runner | None = None  # reused while the batch size stays the same (weights fused once)
        self._runner_batch = 0

    # ---- public API ----------------------------------------------------------------------------
    def generate(
        self,
        prompts: Sequence[Sequence[int]],
        max_new_tokens: int | Sequence[int] = 64,
        sampling: SamplingParams | None = None,
        seed: int = 0,
        stop_ids: Iterable[int] = (),
        min_new_tokens: int = 0,
    ) -> list[list[int]]:
        """New token ids for each prompt, without the stop token that ended it (none before `min_new_tokens`)."""
        limits = _limits(max_new_tokens, len(prompts))
        stops = set(stop_ids)
        with torch.inference_mode():
            steps = self._decode(prompts, limits, sampling or SamplingParams(), seed, stops, self.sync_every,
                                 min_new_tokens)
            produced = torch.stack(list(steps), dim=1) if max(limits) else torch.zeros(len(prompts), 0)
            rows = produced.tolist()  # the one read-back of the whole generation
        results = []
        for row, limit in zip(rows, limits, strict=True):
            row = [int(t) for t in row[:limit]]
            cut = next((i for i, t in enumerate(row) if t in stops), len(row))
            results.append(row[:cut])
        return results

    def stream(
        self,
        prompt: Sequence[int],
        max_new_tokens: int = 64,
        sampling: SamplingParams | None = None,
        seed: int = 0,
        stop_ids: Iterable[int] = (),
        min_new_tokens: int = 0,
    ) -> Iterator[int]:
        """Yield new token ids one by one as they are produced; stops before a stop token.

        `min_new_tokens`: no stop token is drawn before that many tokens (a new document is not empty)."""
        stops = set(stop_ids)
        with torch.inference_mode():
            for step in self._decode([prompt], [max_new_tokens], sampling or SamplingParams(), seed, stops, 1,
                                     min_new_tokens):
                token = int(step[0])
                if token in stops:
                    return
                yield token

    # ---- the loop ------------------------------------------------------------------------------
    def _decode(
        self,
        prompts: Sequence[Sequence[int]],
        limits: list[int],
        sampling: SamplingParams,
        seed: int,
        stops: set[int],
        sync_every: int,
        min_new_tokens: int = 0,
    ) -> Iterator[torch.Tensor]:
        """Yield the batch's next tokens [B] per step until everyone is done."""
        prompts = [list(p)[-self.window :] for p in prompts]  # the model cannot see further back
        if not prompts or any(not p for p in prompts):
            raise ValueError("every prompt needs at least one token (start an empty one with EOT)")
        B, P, total = len(prompts), max(len(p) for p in prompts), max(limits)
        device = self.device
        seq = torch.zeros(B, P + total, dtype=torch.long, device=device)
        for i, p in enumerate(prompts):
            seq[i, P - len(p) : P] = torch.tensor(p, dtype=torch.long)
        starts = [P - len(p) for p in prompts]  # each sequence's context start slot (host side: no syncs)
        slot_ids = torch.arange(P + total, device=device)

        generator = torch.Generator(device=device).manual_seed(seed)
        seen = None
        if sampling.needs_history:
            seen = torch.zeros(B, self.model.config.vocab_size, dtype=torch.bool, device=device)
            for i, p in enumerate(prompts):
                seen[i, torch.tensor(p, device=device)] = True
        limit_t = torch.tensor(limits, device=device)
        done = limit_t <= 0
        stop_t = torch.tensor(sorted(stops), dtype=torch.long, device=device)

        if self._runner is None or self._runner_batch != B:
            self._runner, self._runner_batch = make_runner(self.model, B, self.window, self.use_cache, self.fast), B
        runner = self._runner
        logits, cache_lo = self._encode(runner, seq, starts, slot_ids, P), min(starts)
        end = P
        for step in range(total):
            last = logits[:, -1]
            if step < min_new_tokens and stops:  # before any filter: the stops can never be drawn
                last = last.index_fill(-1, stop_t, float("-inf"))
            token = sample(last, sampling, generator, seen)
            seq[:, end] = token
            end += 1
            yield token
            if seen is not None:
                seen.scatter_(1, token[:, None], True)
            if stops:  # a stop ends its sequence for good; the limits are only compared when someone asks
                done = done | torch.isin(token, stop_t)
            if step + 1 == total or ((step + 1) % sync_every == 0 and bool((done | (limit_t <= step + 1)).all())):
                return
            # feed the new token, re-encoding first if a context or the cache would overflow
            overflow = False
            for i in range(B):
                if end - starts[i] > self.window:
                    starts[i], overflow = end - self.keep, True
            if overflow or end - cache_lo > runner.capacity:
                logits, cache_lo = self._encode(runner, seq[:, :end], starts, slot_ids, end), min(starts)
            else:
                positions = None
                if len(set(starts)) > 1:  # slot index != position only when contexts start apart
                    positions = (end - 1 - torch.tensor(starts, device=device))[:, None]
                logits = runner.extend(seq[:, end - 1 : end], positions)

    @staticmethod
    def _encode(runner: Runner, seq: torch.Tensor, starts: list[int], slot_ids: torch.Tensor,
                end: int) -> torch.Tensor:
        """Reset the runner and prefill every sequence's context (left-padded to the longest)."""
        runner.reset()
        lo = min(starts)
        idx = seq[:, lo:end]
        if len(set(starts)) == 1:
            return runner.extend(idx)
        start_t = torch.tensor(starts, device=seq.device)[:, None]
        slots = slot_ids[lo:end][None]
        return runner.extend(idx, (slots - start_t).clamp(min=0), slots >= start_t)


def _limits(max_new_tokens: int | Sequence[int], n: int) -> list[int]:
    limits = [max_new_tokens] * n if isinstance(max_new_tokens, int) else list(max_new_tokens)
    if len(limits) != n or any(m < 0 for m in limits):
        raise ValueError("max_new_tokens must be >= 0, one value or one per prompt")
    return limits
