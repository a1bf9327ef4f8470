"""`Attend`: softmax(q kᵀ · scale, masked) v, as a module of its own so that inspection can see q and k.

Every attention of both architectures (grouped-query, MLA, the classic model's fused path) calls it
with queries and keys already rotated and key/value heads already expanded to one per query head.
With nothing attached it is `F.scaled_dot_product_attention` and costs nothing more; a hook on it
(models/hooks/attention_pattern.py) turns the same q, k and mask into the probabilities the fused
kernel never materializes, so the pattern shown is the one the model computed.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import nn


class Attend(nn.Module):
    def forward(
        self,
        q: torch.Tensor,
        k: torch.Tensor,
        v: torch.Tensor,
        mask: torch.Tensor | None,
        is_causal: bool,
        scale: float | None = None,
        dropout: float = 0.0,
    ) -> torch.Tensor:
        """q [B, H, T, d], k [B, H, S, d], v [B, H, S, dv]; mask [B or 1, 1, T, S] with True = may attend."""
        return F.scaled_dot_product_attention(q, k, v, attn_mask=mask, is_causal=is_causal, dropout_p=dropout,
                                              scale=scale)
