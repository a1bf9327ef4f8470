"""A short sample at the end of training: the quickest check that a model learned something.

Plain autoregressive sampling without a KV cache (each step re-reads the whole window), which is slow
but obviously correct and works for both architectures; the generation engine in `tinylm.inference`
is the fast path. Logits are divided by the temperature and cut to the top k before sampling. A
private generator keeps sampling from disturbing the training RNG.
"""

from __future__ import annotations

from typing import Any

import torch
from torch import nn


@torch.no_grad()
def sample_ids(model: nn.Module, prompt: list[int], max_new_tokens: int, temperature: float = 0.8,
               top_k: int | None = 50, seed: int = 0, stop_id: int | None = None) -> list[int]:
    """Continue `prompt` by up to `max_new_tokens` ids; temperature 0 is greedy."""
    was_training = model.training
    model.eval()
    device = next(model.parameters()).device
    window = model.config.context_length
    generator = torch.Generator(device=device).manual_seed(seed)
    idx = torch.tensor([prompt], dtype=torch.long, device=device)
    out: list[int] = []
    for _ in range(max_new_tokens):
        logits, _ = model(idx[:, -window:])
        logits = logits[0, -1].float()
        if temperature <= 0:
            next_id = int(logits.argmax())
        else:
            logits = logits / temperature
            if top_k is not None and 0 < top_k < logits.numel():
                kth = torch.topk(logits, top_k).values[-1]
                logits = logits.masked_fill(logits < kth, float("-inf"))
            next_id = int(torch.multinomial(torch.softmax(logits, dim=-1), 1, generator=generator))
        out.append(next_id)
        if stop_id is not None and next_id == stop_id:
            break
        idx = torch.cat([idx, torch.tensor([[next_id]], device=device)], dim=1)
    model.train(was_training)
    return out


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
