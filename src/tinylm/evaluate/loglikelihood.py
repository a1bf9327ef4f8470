"""Log-likelihood of a continuation given a context: the one scorer behind multiple choice and preferences.

A request is (context ids, continuation ids). The model reads context + continuation once and the score
is the sum of log p(continuation token | everything before it), plus whether every continuation token
was the model's argmax (greedy). When the two do not fit the window W, the oldest tokens are dropped,
keeping the last W + 1 and feeding all but the final one, exactly as lm-eval's Hugging Face model does,
so both tools score the same tokens.

Requests are run longest first in right-padded batches: padding sits after the real tokens, where a
causal model cannot see it, so a batched score equals the request scored alone.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import torch
import torch.nn.functional as F
from torch import nn


@dataclass(frozen=True)
class Scored:
    logprob: float  # sum over the continuation's tokens, nats
    greedy: bool  # every continuation token was the argmax


def window_input(context: Sequence[int], continuation: Sequence[int], window: int) -> tuple[list[int], int]:
    """(the ids fed to the model, how many of its last positions predict the continuation)."""
    if not continuation:
        raise ValueError("a continuation needs at least one token")
    if not context:
        raise ValueError("a context needs at least one token (start it with end-of-text)")
    whole = [*context, *continuation][-(window + 1):]
    return whole[:-1], len(continuation)


@torch.no_grad()
def score_continuations(model: nn.Module, requests: Sequence[tuple[Sequence[int], Sequence[int]]],
                        batch_size: int = 32) -> list[Scored]:
    """One `Scored` per (context, continuation) request, in order; the model is left in its mode."""
    window = model.config.context_length
    device = next(model.parameters()).device
    inputs = [window_input(context, continuation, window) for context, continuation in requests]
    targets = [list(continuation)[-n:] for (_, continuation), (_, n) in zip(requests, inputs, strict=True)]
    order = sorted(range(len(inputs)), key=lambda i: -len(inputs[i][0]))
    results: list[Scored | None] = [None] * len(inputs)
    was_training = model.training
    model.eval()
    try:
        for first in range(0, len(order), batch_size):
            chunk = order[first:first + batch_size]
            width = len(inputs[chunk[0]][0])
            idx = torch.zeros(len(chunk), width, dtype=torch.long)
            for row, i in enumerate(chunk):
                ids = inputs[i][0]
                idx[row, :len(ids)] = torch.tensor(ids)
            logits, _ = model(idx.to(device))
            logprobs = F.log_softmax(logits.float(), dim=-1)
            for row, i in enumerate(chunk):
                length, n = len(inputs[i][0]), inputs[i][1]
                wanted = torch.tensor(targets[i], device=device)
                rows = logprobs[row, length - n:length]
                picked = rows.gather(1, wanted[:, None])[:, 0]
                results[i] = Scored(float(picked.sum()), bool((rows.argmax(-1) == wanted).all()))
    finally:
        model.train(was_training)
    return [r for r in results if r is not None]
