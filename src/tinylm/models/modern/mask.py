"""Which keys each query may see: causal, optionally within a sliding window, never padding.

Returns `None` when plain causal attention (or, for one new token, attending to everything) says it
all, so the common paths use SDPA's fused `is_causal` without building a mask tensor.
"""

from __future__ import annotations

import torch


def attention_mask(
    q_len: int,
    start: int,
    window: int | None,
    key_valid: torch.Tensor | None,
    device: torch.device,
) -> tuple[torch.Tensor | None, bool]:
    """(mask [B or 1, 1, T, S] with True = may attend, is_causal) for queries at slots start..start+T-1."""
    k_len = start + q_len
    window_bites = window is not None and window < k_len
    if key_valid is None and not window_bites:
        if start == 0:
            return None, q_len > 1
        if q_len == 1:
            return None, False
    q_slot = torch.arange(start, k_len, device=device)[:, None]
    k_slot = torch.arange(k_len, device=device)[None, :]
    allowed = k_slot <= q_slot
    if window is not None:
        allowed = allowed & (q_slot - k_slot < window)
    if key_valid is not None:
        # a padding query would see no key at all (NaN softmax): let every query see itself
        allowed = (allowed[None] & key_valid[:, None, :]) | (k_slot == q_slot)[None]
        return allowed[:, None], False
    return allowed[None, None], False
