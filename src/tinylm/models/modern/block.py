"""One modern decoder block: pre-norm attention and pre-norm MLP, each added to the residual stream.

    x = x + Attention(RMSNorm(x))
    x = x + MLP(RMSNorm(x))        (SwiGLU, ReLU^2, or a mixture of SwiGLU experts)
"""

from __future__ import annotations

import torch
from torch import nn

from tinylm.config import ModelConfig
from tinylm.models.modern.attention import Attention
from tinylm.models.modern.kv_cache import KVCache
from tinylm.models.modern.mla import MultiHeadLatentAttention
from tinylm.models.modern.mlp import SwiGLU
from tinylm.models.modern.moe import MixtureOfExperts
from tinylm.models.modern.norm import RMSNorm
from tinylm.models.modern.relu2 import ReLUSquared


class ModernBlock(nn.Module):
    def __init__(self, config: ModelConfig, index: int) -> None:
        super().__init__()
        self.index = index
        self.attn_norm = RMSNorm(config.n_embed, config.norm_eps)
        self.attn = MultiHeadLatentAttention(config) if config.attention == "mla" else Attention(config)
        self.mlp_norm = RMSNorm(config.n_embed, config.norm_eps)
        if config.is_moe:
            self.mlp: nn.Module = MixtureOfExperts(config)
        elif config.mlp_type == "relu2":
            self.mlp = ReLUSquared(config.n_embed, config.mlp_width, config.dropout)
        else:
            self.mlp = SwiGLU(config.n_embed, config.mlp_width, config.dropout)

    def forward(
        self,
        x: torch.Tensor,
        cos: torch.Tensor,
        sin: torch.Tensor,
        mask: torch.Tensor | None,
        is_causal: bool,
        cache: KVCache | None = None,
    ) -> tuple[torch.Tensor, torch.Tensor | None]:
        """(new residual stream, MoE load-balancing loss or None)."""
        x = x + self.attn(self.attn_norm(x), cos, sin, mask, is_causal, cache, self.index)
        if isinstance(self.mlp, MixtureOfExperts):
            out, aux = self.mlp(self.mlp_norm(x))
            return x + out, aux
        return x + self.mlp(self.mlp_norm(x)), None
