"""SwiGLU: a gated MLP, down(silu(gate(x)) * up(x)) (Shazeer, 2020).

One projection (`gate`) decides, feature by feature and smoothly, how much of the other (`up`)
passes. Three matrices instead of two, so the hidden width is 8/3 * n_embed (rounded up to a
multiple of 64, see `config.swiglu_hidden`) to keep the parameter count of a 4x ReLU MLP.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import nn


class SwiGLU(nn.Module):
    def __init__(self, n_embed: int, hidden: int, dropout: float = 0.0) -> None:
        super().__init__()
        self.gate = nn.Linear(n_embed, hidden, bias=False)
        self.up = nn.Linear(n_embed, hidden, bias=False)
        self.down = nn.Linear(hidden, n_embed, bias=False)  # writes into the residual stream
        self.dropout = nn.Dropout(dropout)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.dropout(self.down(F.silu(self.gate(x)) * self.up(x)))
