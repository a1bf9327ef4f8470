"""A short sample at the end of training: the quickest check that a model learned something.

It goes through the generation engine (`tinylm.inference.Engine`) with the model's own KV cache, and
without the fused fast decoder, which would re-lay the weights of a model that may still be trained.
The window slides one token at a time (keep = context length), as in nanoGPT. The engine samples
with its own seeded generator, so sampling never disturbs the training RNG: the same seed gives the
same text.

A prompt starts a document, after end-of-text as every document in training does. Without --prompt
it is the corpus's own: on the default corpus, the standard library's source, a function ("def"), so
the sample shows the Python the model learned. A new document (any other corpus, or --prompt "")
opens as the corpus's files do, which in the standard library is often a license header or a run of
comment lines that a small model repeats in a loop (seen on `make demo`'s model, where "def" gave
functions with docstrings and bodies, and "import" or a module docstring loops of their own); and it
never ends before its first token, though end-of-text often follows end-of-text in training.
"""

from __future__ import annotations

from typing import Any

from torch import nn

from tinylm.inference.engine import Engine
from tinylm.inference.sampling import SamplingParams

CORPUS_PROMPTS = {"pystdlib": "def"}  # a prepared corpus (its sidecar's "corpus") -> the sample's default prompt


def closing_prompt(prompt: str | None, corpus: str | None) -> str:
    """The prompt of the sample at the end: --prompt when given, else the corpus's own ("" = a new document)."""
    return prompt if prompt is not None else CORPUS_PROMPTS.get(corpus or "", "")


def sample_ids(model: nn.Module, prompt: list[int], max_new_tokens: int, temperature: float = 0.8,
               top_k: int | None = 50, seed: int = 0, stop_id: int | None = None,
               min_new_tokens: int = 0) -> list[int]:
    """Continue `prompt` by up to `max_new_tokens` ids (ending with `stop_id` if it came, never before
    `min_new_tokens`); temperature 0 is greedy."""
    was_training = model.training
    try:
        engine = Engine(model, fast=False, keep=model.config.context_length)
        stops = () if stop_id is None else (stop_id,)
        # as before: temperature <= 0 is greedy and top_k <= 0 means no cut, so a training run never fails late
        sampling = SamplingParams(temperature=max(temperature, 0.0), top_k=top_k if top_k and top_k > 0 else None)
        new = engine.generate([prompt], max_new_tokens, sampling, seed=seed, stop_ids=stops,
                              min_new_tokens=min_new_tokens)[0]
    finally:
        model.train(was_training)
    if stop_id is not None and len(new) < max_new_tokens:  # the engine drops the stop token that ended it
        new.append(stop_id)
    return new


def sample_text(model: nn.Module, tokenizer: Any, prompt: str, max_new_tokens: int = 100,
                temperature: float = 0.8, top_k: int | None = 50, seed: int = 0) -> str:
    """Prompt + continuation as text; stops early at the end-of-text token (a new document: not before one token)."""
    ids = list(tokenizer.encode(prompt)) if prompt else []
    eot = getattr(tokenizer, "eot_id", None)
    context = ([] if eot is None else [eot]) + ids or [0]  # a document starts after end-of-text
    new = sample_ids(model, context, max_new_tokens, temperature, top_k, seed, stop_id=eot,
                     min_new_tokens=0 if ids else 1)
    if new and eot is not None and new[-1] == eot:
        new = new[:-1]
    return tokenizer.decode(ids + new)  # decoded together: a byte-level token split never garbles text
