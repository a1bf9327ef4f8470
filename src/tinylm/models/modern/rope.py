"""Rotary position embeddings (RoPE, Su et al. 2021).

Each pair of dimensions of a query or key is rotated by an angle proportional to the token's
position, pos * theta^(-2i/d). A dot product between a query at position m and a key at position n
then depends only on m - n: attention sees relative positions, with no learned table.

Pairing convention ("rotate half", as in Hugging Face Llama): dimension i is paired with dimension
i + d/2, so the rotation is  x * cos + rotate_half(x) * sin  with  rotate_half([a, b]) = [-b, a].
The angle tables are computed once in float32 and cached, never recomputed per decode step.
"""

from __future__ import annotations

import torch
from torch import nn


def rotate_half(x: torch.Tensor) -> torch.Tensor:
    first, second = x.chunk(2, dim=-1)
    return torch.cat((-second, first), dim=-1)


def apply_rope(x: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor) -> torch.Tensor:
    """Rotate x [B, H, T, D] by angles whose cos/sin are [B or 1, 1, T, D]."""
    return x * cos + rotate_half(x) * sin


class RotaryEmbedding(nn.Module):
    def __init__(self, dim: int, max_positions: int, theta: float = 10000.0) -> None:
        super().__init__()
        if dim % 2:
            raise ValueError(f"RoPE needs an even dimension, got {dim}")
        self.dim, self.theta = dim, theta
        inv_freq = 1.0 / (theta ** (torch.arange(0, dim, 2, dtype=torch.int64).float() / dim))
        self.register_buffer("inv_freq", inv_freq, persistent=False)
        self._build(max_positions)

    def _build(self, n: int) -> None:
        freqs = torch.outer(torch.arange(n, dtype=torch.float32, device=self.inv_freq.device), self.inv_freq)
        angles = torch.cat((freqs, freqs), dim=-1)  # [n, dim]: pair i and i + dim/2 share an angle
        self.register_buffer("cos_table", angles.cos(), persistent=False)
        self.register_buffer("sin_table", angles.sin(), persistent=False)

    def forward(
        self, positions: torch.Tensor, dtype: torch.dtype, upto: int
    ) -> tuple[torch.Tensor, torch.Tensor]:
        """cos, sin of shape [B or 1, 1, T, dim] for integer positions [T] or [B, T], all < upto.

        `upto` is known to the caller without reading the tensor, so no device sync happens here.
        """
        if upto > self.cos_table.shape[0]:
            self._build(max(upto, 2 * self.cos_table.shape[0]))
        if positions.dim() == 1:
            positions = positions[None]
        cos = self.cos_table[positions].unsqueeze(1).to(dtype)
        sin = self.sin_table[positions].unsqueeze(1).to(dtype)
        return cos, sin
