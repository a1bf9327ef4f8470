"""Decode throughput, measured the same way for tinylm and for Hugging Face `transformers`.

`decode_tokens_per_s` times greedy generation of `new_tokens` tokens after a short prompt through
the engine (prefill included, as `transformers.generate` includes it), best of `repeats` runs after a
warm-up. `hf_decode_tokens_per_s` runs `transformers` `generate` on the same weights (mapped with
`tinylm.interop.hf.to_hf_model`), so the ratio of the two compares implementations, not models.
Neither function asserts anything about time; benchmarks/bench_decode.py prints their results.
"""

from __future__ import annotations

import time

import torch
from torch import nn

from tinylm.inference.engine import Engine
from tinylm.inference.sampling import GREEDY
from tinylm.interop.hf import to_hf_model


def _prompt(model: nn.Module, prompt_len: int, batch_size: int) -> list[list[int]]:
    generator = torch.Generator().manual_seed(0)
    ids = torch.randint(0, model.config.vocab_size, (batch_size, prompt_len), generator=generator)
    return ids.tolist()


def _best_time(run, repeats: int) -> float:
    best = float("inf")
    for _ in range(repeats):
        start = time.perf_counter()
        run()
        best = min(best, time.perf_counter() - start)
    return best


def decode_tokens_per_s(
    model: nn.Module,
    new_tokens: int = 256,
    prompt_len: int = 8,
    batch_size: int = 1,
    use_cache: bool = True,
    fast: bool = True,
    repeats: int = 3,
) -> float:
    """Generated tokens per second (all sequences together) of greedy decoding with tinylm's engine."""
    engine = Engine(model, use_cache=use_cache, fast=fast)
    prompts = _prompt(model, prompt_len, batch_size)
    engine.generate(prompts, min(new_tokens, 16), GREEDY)  # warm-up: allocator, kernels, thread pool
    seconds = _best_time(lambda: engine.generate(prompts, new_tokens, GREEDY), repeats)
    return batch_size * new_tokens / seconds


def hf_decode_tokens_per_s(model: nn.Module, new_tokens: int = 256, prompt_len: int = 8, repeats: int = 3) -> float:
    """The same measurement with `transformers` `generate` (cached greedy) on the same weights, batch 1."""
    hf = to_hf_model(model).to(next(model.parameters()).dtype).eval()  # the same weight dtype as ours
    ids = torch.tensor(_prompt(model, prompt_len, 1), device=next(model.parameters()).device)
    hf = hf.to(ids.device)
    options = dict(do_sample=False, use_cache=True, pad_token_id=0, eos_token_id=None)

    def run(n: int) -> None:
        with torch.inference_mode():
            out = hf.generate(ids, max_new_tokens=n, min_new_tokens=n, **options)
        if out.shape[1] != prompt_len + n:
            raise RuntimeError(f"transformers generated {out.shape[1] - prompt_len} tokens, expected {n}")

    run(min(new_tokens, 16))
    return new_tokens / _best_time(lambda: run(new_tokens), repeats)
