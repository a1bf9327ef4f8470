"""Every head's attention pattern over a prompt, and the numbers that say what kind of head it is.

For head h of layer l, A[q][k] is the probability query position q gives key position k (each row sums
to 1). Per head:

    entropy          mean over queries of -sum_k A[q][k] ln A[q][k]   (0: one key; ln(q+1): uniform)
    previous-token   mean over q >= 1 of A[q][q-1]
    first-token      mean over q >= 1 of A[q][0]        (an "attention sink" when near 1)
    induction        mean, over queries whose token appeared before, of the attention to the tokens
                     that followed its earlier occurrences (prefix matching, Olsson et al. 2022)

Heads that share key/value heads (grouped-query and multi-query attention) are listed by group; a
sliding window shows as zeros beyond it; MLA's heads all read one shared latent.
"""

from __future__ import annotations

from typing import Any

import torch

from tinylm.errors import TinyLMError
from tinylm.interpret.loading import Inspected, as_batch
from tinylm.models.hooks.attention_pattern import record_attention
from tinylm.models.hooks.sites import kv_head_of


@torch.no_grad()
def attention_patterns(inspected: Inspected, ids: list[int]) -> torch.Tensor:
    """[n_blocks, n_head, T, T] attention probabilities for one prompt."""
    with record_attention(inspected.model) as patterns:
        inspected.model(as_batch(ids))
    return torch.cat(patterns)


def head_scores(pattern: torch.Tensor, ids: list[int]) -> dict[str, torch.Tensor]:
    """Per-head scores of patterns [L, H, T, T] over tokens `ids`, each [L, H]."""
    T = pattern.shape[-1]
    entropy = -(pattern * pattern.clamp_min(1e-30).log()).sum(-1).mean(-1)
    if T < 2:
        zero = torch.zeros(pattern.shape[:2])
        return {"entropy": entropy, "previous_token": zero, "first_token": zero, "induction": zero}
    q = torch.arange(1, T)
    previous = pattern[..., q, q - 1].mean(-1)
    first = pattern[..., 1:, 0].mean(-1)
    tokens = torch.tensor(ids)
    # key k is an induction target of query q when the token before k equals q's token, and k <= q
    same = tokens[None, :-1] == tokens[:, None]  # [q, k-1]
    targets = torch.zeros(T, T, dtype=torch.bool)
    targets[:, 1:] = same & (torch.arange(1, T)[None, :] <= torch.arange(T)[:, None])
    has = targets.any(-1)
    if has.any():
        induction = (pattern * targets).sum(-1)[..., has].mean(-1)
    else:
        induction = torch.zeros(pattern.shape[:2])
    return {"entropy": entropy, "previous_token": previous, "first_token": first, "induction": induction}


def attention_view(inspected: Inspected, ids: list[int], layer: int | None = None,
                   head: int | None = None) -> dict[str, Any]:
    """{"ids", "tokens", "attention": A[layer][head][query][key], "scores": {name: [layer][head]},
    "kv_head": the key/value head each query head reads, "layers" and "heads": which ones A holds}."""
    config = inspected.model.config
    if layer is not None and not 0 <= layer < config.n_blocks:
        raise TinyLMError(f"--layer {layer} is out of range: this model has layers 0 to {config.n_blocks - 1}")
    if head is not None and not 0 <= head < config.n_head:
        raise TinyLMError(f"--head {head} is out of range: this model has heads 0 to {config.n_head - 1}")
    patterns = attention_patterns(inspected, ids)
    scores = head_scores(patterns, ids)
    layers = [layer] if layer is not None else list(range(config.n_blocks))
    heads = [head] if head is not None else list(range(config.n_head))
    return {
        "ids": ids, "tokens": inspected.labels(ids), "layers": layers, "heads": heads,
        "attention": patterns[layers][:, heads].tolist(),
        "scores": {name: value[layers][:, heads].tolist() for name, value in scores.items()},
        "kv_head": kv_head_of(inspected.model),
        "attention_kind": attention_kind(config),
    }


def attention_kind(config: Any) -> str:
    """In words: which attention the model has, for the page's header."""
    if config.arch == "classic":
        return f"multi-head attention, {config.n_head} heads"
    if config.attention == "mla":
        kind = f"multi-head latent attention (MLA), {config.n_head} heads reading one latent of {config.kv_lora_rank}"
    elif config.kv_heads == config.n_head:
        kind = f"multi-head attention, {config.n_head} heads"
    elif config.kv_heads == 1:
        kind = f"multi-query attention: {config.n_head} query heads share one key/value head"
    else:
        kind = (f"grouped-query attention: {config.n_head} query heads share {config.kv_heads} key/value heads, "
                f"{config.n_head // config.kv_heads} each")
    if config.sliding_window:
        kind += f"; sliding window of {config.sliding_window} tokens"
    return kind
