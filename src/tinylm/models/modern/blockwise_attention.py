"""Causal attention computed one block of queries at a time, skipping the keys no query of the block sees.

    y = softmax(q k^T / sqrt(D) + mask) v        (the mask is -inf above the diagonal)

Half of the score matrix of causal attention is masked away. Queries lo..hi-1 only ever see keys
0..hi-1, so each block multiplies against that prefix of the keys and never computes the rest:
with four blocks the products cover (1 + 2 + 3 + 4) / 16 = 62.5% of the full square, and every
product is an ordinary large matrix multiplication. The mask is written into the scores in place,
one pass fewer.

Precision. In float32 this is SDPA's function to 1e-5 (tests/test_blockwise_attention.py). In bf16
the scores come out of a bf16 product, so they are rounded to bf16 before the softmax, exactly as
`transformers`' eager attention (and nanoGPT's manual attention under autocast) does; the softmax
kernel itself computes in float32 and rounds only its output (bit-identical to a float32 softmax
rounded to bf16, tested), so the scores are not taken to float32 first, which would double the
traffic for nothing. SDPA's flash kernel keeps its scores in float32 and is more accurate: on
random inputs with scores of a few units its mean error against float64 is about 4x smaller. The
tests pin our bf16 error to that of `transformers`' `eager_attention_forward` on the same inputs,
and docs/pipeline/precision.md shows the training curves this gives. CPUs have no product of bf16
inputs with float32 output that PyTorch exposes, which would give both the speed and the accuracy.

Why not always `F.scaled_dot_product_attention`: on a GPU its flash kernel is the right answer and
this file is never used there. On a CPU its flash kernel walks small tiles: at the `small` preset
(8 x 512 tokens, 6 heads of 64, 2 KV heads) forward + backward measured 57 ms in bf16 against 22 ms
here, and 66 ms in float32 against 50 ms. Which is faster depends on the CPU, the shape and the
dtype, so a run takes this path only where `runtime/attention_policy.py` measured it faster.

Grouped heads need no copies of the keys: the G query heads sharing one key/value head are stacked
as G x block rows against that head's keys. Autograd differentiates the block products; nothing here
is a hand-written backward.
"""

from __future__ import annotations

import math

import torch
import torch.nn.functional as F

QUERY_BLOCK_ROWS = 32  # no block smaller than this: tiny products cost more in dispatch than they skip
MAX_QUERY_BLOCKS = 4  # four blocks skip 37.5% of the square; more blocks measured no faster (more, smaller products)


def query_blocks(length: int) -> list[tuple[int, int]]:
    """[(lo, hi)] splitting 0..length into up to MAX_QUERY_BLOCKS near-equal blocks."""
    n = max(1, min(MAX_QUERY_BLOCKS, length // QUERY_BLOCK_ROWS))
    edges = [round(i * length / n) for i in range(n + 1)]
    return list(zip(edges[:-1], edges[1:], strict=True))


def blockwise_causal_attention(
    q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, mask: torch.Tensor | None = None,
    dropout_p: float = 0.0,
) -> torch.Tensor:
    """Attention of q [B, H, T, D] over k, v [B, K, T, D] (H a multiple of K), queries and keys at slots 0..T-1.

    `mask` [B or 1, 1, T, T] (True = may attend) must allow nothing above the diagonal (every mask
    `mask.attention_mask` builds without a cache qualifies); None means plain causal.
    """
    B, H, T, D = q.shape
    K = k.shape[1]
    G = H // K
    grouped = q.view(B, K, G, T, D)
    scale = 1.0 / math.sqrt(D)
    rows = torch.arange(T, device=q.device)
    outputs = []
    for lo, hi in query_blocks(T):
        n = hi - lo
        q_block = (grouped[:, :, :, lo:hi] * scale).reshape(B, K, G * n, D)  # the G heads' rows, stacked
        scores = q_block @ k[:, :, :hi].transpose(-1, -2)  # [B, K, G*n, hi]
        if mask is None:
            hidden = (rows[:hi][None, :] > rows[lo:hi, None]).repeat(G, 1)  # key after query: [G*n, hi]
        else:  # [B or 1, 1, n, hi] -> [B or 1, 1, G*n, hi], the same rows for every head of a group
            hidden = ~mask[:, :, lo:hi, :hi].repeat(1, 1, G, 1)
        probs = torch.softmax(scores.masked_fill_(hidden, float("-inf")), dim=-1).to(v.dtype)
        if dropout_p > 0.0:
            probs = F.dropout(probs, dropout_p)
        outputs.append((probs @ v[:, :, :hi]).view(B, K, G, n, D))
    return torch.cat(outputs, dim=3).view(B, H, T, D)
