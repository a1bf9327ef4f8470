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

from tinylm.models.modern.rope_scaling import RopeScaling, inverse_frequencies


def rotate_half(x: torch.Tensor) -> torch.Tensor:
    first, second = x.chunk(2, dim=-1)
    return torch.cat((-second, first), dim=-1)


def apply_rope(x: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor) -> torch.Tensor:
    """Rotate x [B, H, T, D] by angles whose cos/sin are [B or 1, 1, T, D]."""
    return x * cos + rotate_half(x) * sin


class RotaryEmbedding(nn.Module):
    """cos/sin tables of the model's RoPE, with its scaling rule (`rope_scaling/`) applied.

    A fixed rule's tables are built once and grown when a longer sequence comes; the dynamic rule's
    depend on the length being read, so past the original context they are rebuilt for each length.
    """

    def __init__(self, dim: int, max_positions: int, theta: float = 10000.0,
                 scaling: RopeScaling | None = None) -> None:
        super().__init__()
        if dim % 2:
            raise ValueError(f"RoPE needs an even dimension, got {dim}")
        self.dim, self.theta = dim, theta
        self.scaling = scaling or RopeScaling(theta=theta, original_context=max_positions)
        inv_freq, self.attention_factor = inverse_frequencies(self.scaling, dim, max_positions)
        self.register_buffer("inv_freq", inv_freq, persistent=False)
        self.built_for = max(max_positions, self.scaling.original_context)  # the dynamic rule's table length
        self._build(max_positions)

    def _build(self, n: int) -> None:
        freqs = torch.outer(torch.arange(n, dtype=torch.float32, device=self.inv_freq.device), self.inv_freq)
        angles = torch.cat((freqs, freqs), dim=-1)  # [n, dim]: pair i and i + dim/2 share an angle
        self.register_buffer("cos_table", angles.cos() * self.attention_factor, persistent=False)
        self.register_buffer("sin_table", angles.sin() * self.attention_factor, persistent=False)

    def _rebuild_for_length(self, seq_len: int) -> None:
        """Dynamic NTK: the frequencies of a `seq_len`-token sequence (plain RoPE up to the original context)."""
        length = max(seq_len, self.scaling.original_context)
        if length != self.built_for:
            inv_freq, _ = inverse_frequencies(self.scaling, self.dim, length)
            self.inv_freq = inv_freq.to(self.inv_freq.device)
            self.built_for = length
            self._build(length)

    def forward(
        self, positions: torch.Tensor, dtype: torch.dtype, upto: int
    ) -> tuple[torch.Tensor, torch.Tensor]:
        """cos, sin of shape [B or 1, 1, T, dim] for integer positions [T] or [B, T], all < upto.

        `upto` is known to the caller without reading the tensor, so no device sync happens here. For the
        dynamic rule it is also the length of the sequence being read.
        """
        if self.scaling.depends_on_length:
            self._rebuild_for_length(upto)
        elif upto > self.cos_table.shape[0]:
            self._build(max(upto, 2 * self.cos_table.shape[0]))
        if positions.dim() == 1:
            positions = positions[None]
        cos = self.cos_table[positions].unsqueeze(1).to(dtype)
        sin = self.sin_table[positions].unsqueeze(1).to(dtype)
        return cos, sin
