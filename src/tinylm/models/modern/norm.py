"""RMSNorm: scale each vector by the inverse of its root mean square (no centering, no bias).

    RMSNorm(x) = x / sqrt(mean(x^2) + eps) * weight

The statistic is computed in float32 even when the model runs in bfloat16: squaring small bf16
numbers loses most of their precision, and a slightly wrong norm in every layer adds up. The
normalized value is cast back to the input dtype *before* the weight multiplies it, the order
`torch.nn.RMSNorm` and Hugging Face Llama use too (tests/test_modern_model.py checks both).
"""

from __future__ import annotations

import torch
from torch import nn


class RMSNorm(nn.Module):
    def __init__(self, dim: int, eps: float = 1e-5) -> None:
        super().__init__()
        self.eps = eps
        self.weight = nn.Parameter(torch.ones(dim))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x32 = x.float()  # squares of bf16 numbers lose precision
        normed = x32 * torch.rsqrt(x32.pow(2).mean(dim=-1, keepdim=True) + self.eps)
        return normed.type_as(x) * self.weight

    def extra_repr(self) -> str:
        return f"{self.weight.shape[0]}, eps={self.eps}"
