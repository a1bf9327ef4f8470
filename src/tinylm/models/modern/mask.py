"""Which keys each query may see: causal, optionally within a sliding window, never padding, never another
conversation of a packed row.

Returns `None` when plain causal attention (or, for one new token, attending to everything) says it
all, so the common paths use SDPA's fused `is_causal` without building a mask tensor.

Packing several conversations into one row (data/packing.py) gives each token a segment id;
a query then sees only the keys of its own segment, so every conversation is computed exactly as if
it were alone in its row. Both architectures build their masks here.
"""

from __future__ import annotations

import torch


def attention_mask(
    q_len: int,
    start: int,
    window: int | None,
    key_valid: torch.Tensor | None,
    device: torch.device,
    segments: torch.Tensor | None = None,
) -> tuple[torch.Tensor | None, bool]:
    """(mask [B or 1, 1, T, S] with True = may attend, is_causal) for queries at slots start..start+T-1.

    key_valid [B, S]: False for padding keys. segments [B, S]: integer id per key slot (the queries
    are the last T slots); a query may attend only to keys with its own id.
    """
    k_len = start + q_len
    window_bites = window is not None and window < k_len
    if key_valid is None and segments is None and not window_bites:
        if start == 0:
            return None, q_len > 1
        if q_len == 1:
            return None, False
    q_slot = torch.arange(start, k_len, device=device)[:, None]
    k_slot = torch.arange(k_len, device=device)[None, :]
    allowed = (k_slot <= q_slot)[None]  # [1, T, S]
    if window is not None:
        allowed = allowed & (q_slot - k_slot < window)
    if segments is not None:
        allowed = allowed & (segments[:, start:, None] == segments[:, None, :])
    if key_valid is not None:
        # a padding query would see no key at all (NaN softmax): let every query see itself
        allowed = (allowed & key_valid[:, None, :]) | (k_slot == q_slot)[None]
    return allowed[:, None], False
