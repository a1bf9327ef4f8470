"""ReLU^2: an ungated MLP, down(relu(up(x))^2) (So et al., 2021, "Primer"; modded-nanogpt's MLP).

Squaring the ReLU keeps it zero for negative inputs and makes it grow like x^2 for positive ones: a
sharper, sparser feature than SwiGLU's smooth gate, with two matrices instead of three. For the same
parameters the hidden layer is 3/2 of SwiGLU's (`ModelConfig.mlp_width`), so `mlp_type=relu2` against
`swiglu` is a race at equal size and equal matmul FLOPs.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import nn


class ReLUSquared(nn.Module):
    def __init__(self, n_embed: int, hidden: int, dropout: float = 0.0) -> None:
        super().__init__()
        self.up = nn.Linear(n_embed, hidden, bias=False)
        self.down = nn.Linear(hidden, n_embed, bias=False)  # writes into the residual stream
        self.dropout = nn.Dropout(dropout)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.dropout(self.down(F.relu(self.up(x)).square()))
