"""A short sample at the end of training: the quickest check that a model learned something.

It goes through the generation engine (`tinylm.inference.Engine`) with the model's own KV cache, and
without the fused fast decoder, which would re-lay the weights of a model that may still be trained.
The window slides one token at a time (keep = context length), as in nanoGPT. The engine samples
with its own seeded generator, so sampling never disturbs the training RNG.
"""

from __future__ import annotations

from typing import Any

from torch import nn

from tinylm.inference.engine import Engine
from tinylm.inference.sampling import SamplingParams


def sample_ids(model: nn.Module, prompt: list[int], max_new_tokens: int, temperature: float = 0.8,
               top_k: int | None = 50, seed: int = 0, stop_id: int | None = None) -> list[int]:
    """Continue `prompt` by up to `max_new_tokens` ids (ending with `stop_id` if it came); 0 is greedy."""
    was_training = model.training
    try:
        engine = Engine(model, fast=False, keep=model.config.context_length)
        stops = () if stop_id is None else (stop_id,)
        # as before: temperature <= 0 is greedy and top_k <= 0 means no cut, so a training run never fails late
        sampling = SamplingParams(temperature=max(temperature, 0.0), top_k=top_k if top_k and top_k > 0 else None)
        new = engine.generate([prompt], max_new_tokens, sampling, seed=seed, stop_ids=stops)[0]
    finally:
        model.train(was_training)
    if stop_id is not None and len(new) < max_new_tokens:  # the engine drops the stop token that ended it
        new.append(stop_id)
    return new


def sample_text(model: nn.Module, tokenizer: Any, prompt: str, max_new_tokens: int = 100,
                temperature: float = 0.8, top_k: int | None = 50, seed: int = 0) -> str:
    """Prompt + continuation as text; stops early at the end-of-text token."""
    ids = list(tokenizer.encode(prompt)) if prompt else []
    eot = getattr(tokenizer, "eot_id", None)
    context = ids or [eot if eot is not None else 0]  # an empty prompt starts a fresh document
    new = sample_ids(model, context, max_new_tokens, temperature, top_k, seed, stop_id=eot)
    if new and eot is not None and new[-1] == eot:
        new = new[:-1]
    return tokenizer.decode(ids + new)  # decoded together: a byte-level token split never garbles text
