"""Multi-head latent attention (MLA, DeepSeek-V2/V3): cache a small latent, not full keys and values.

Keys and values are rebuilt from one compressed vector per token,

    c_kv = RMSNorm(W_dkv x)             (kv_lora_rank numbers)
    [k_nope, v] = W_ukv c_kv            (split per head)

so the cache stores only c_kv. Rotating keys with RoPE would break that compression, so position
goes through a separate small key, k_rope = RoPE(W_kr x), shared by all heads and cached too
(the "decoupled rotary key"). Each head attends with q = [q_nope, q_rope] against
k = [k_nope, k_rope]. Per token and layer the cache holds kv_lora_rank + qk_rope_head_dim numbers
instead of 2 * n_head * head_dim.

This file keeps the readable form: keys and values are re-expanded from the cached latents at each
step. DeepSeek's inference trick of absorbing W_ukv into the query and output projections is an
optimization of the same computation.
"""

from __future__ import annotations

import torch
from torch import nn

from tinylm.config import ModelConfig
from tinylm.models.attend import Attend
from tinylm.models.modern.kv_cache import KVCache
from tinylm.models.modern.norm import RMSNorm
from tinylm.models.modern.rope import apply_rope


class MultiHeadLatentAttention(nn.Module):
    def __init__(self, config: ModelConfig) -> None:
        super().__init__()
        self.n_head = config.n_head
        self.nope_dim, self.rope_dim, self.v_dim = config.nope_dim, config.qk_rope_head_dim, config.value_dim
        self.kv_rank = config.kv_lora_rank
        qk_dim = self.nope_dim + self.rope_dim
        self.scale = qk_dim**-0.5
        if config.q_lora_rank is None:
            self.q_proj = nn.Linear(config.n_embed, self.n_head * qk_dim, bias=False)
        else:  # queries can be compressed too (saves activation memory in training, not cache)
            self.q_a_proj = nn.Linear(config.n_embed, config.q_lora_rank, bias=False)
            self.q_a_norm = RMSNorm(config.q_lora_rank, config.norm_eps)
            self.q_b_proj = nn.Linear(config.q_lora_rank, self.n_head * qk_dim, bias=False)
        self.kv_a_proj = nn.Linear(config.n_embed, self.kv_rank + self.rope_dim, bias=False)  # latent + rotary key
        self.kv_a_norm = RMSNorm(self.kv_rank, config.norm_eps)
        self.kv_b_proj = nn.Linear(self.kv_rank, self.n_head * (self.nope_dim + self.v_dim), bias=False)
        self.o_proj = nn.Linear(self.n_head * self.v_dim, config.n_embed, bias=False)  # residual writer
        self.dropout = config.dropout
        self.resid_dropout = nn.Dropout(config.dropout)
        self.attend = Attend()  # F.scaled_dot_product_attention, where inspection can see q and k

    def _queries(self, x: torch.Tensor) -> torch.Tensor:
        if hasattr(self, "q_proj"):
            return self.q_proj(x)
        return self.q_b_proj(self.q_a_norm(self.q_a_proj(x)))

    def forward(
        self,
        x: torch.Tensor,
        cos: torch.Tensor,
        sin: torch.Tensor,
        mask: torch.Tensor | None,
        is_causal: bool,
        cache: KVCache | None = None,
        layer: int = 0,
    ) -> torch.Tensor:
        B, T, _ = x.shape
        q = self._queries(x).view(B, T, self.n_head, -1).transpose(1, 2)
        q_nope, q_rope = q.split([self.nope_dim, self.rope_dim], dim=-1)
        q = torch.cat((q_nope, apply_rope(q_rope, cos, sin)), dim=-1)

        latent, k_rope = self.kv_a_proj(x).split([self.kv_rank, self.rope_dim], dim=-1)
        latent = self.kv_a_norm(latent)  # [B, T, kv_rank]
        k_rope = apply_rope(k_rope[:, None], cos, sin)[:, 0]  # [B, T, rope_dim], one head shared by all
        if cache is not None:  # the cache holds only the latent and the rotary key
            latent = cache.write(layer, "latent", latent)
            k_rope = cache.write(layer, "k_rope", k_rope)
        S = latent.shape[1]
        kv = self.kv_b_proj(latent).view(B, S, self.n_head, self.nope_dim + self.v_dim).transpose(1, 2)
        k_nope, v = kv.split([self.nope_dim, self.v_dim], dim=-1)
        k = torch.cat((k_nope, k_rope[:, None].expand(B, self.n_head, S, self.rope_dim)), dim=-1)

        y = self.attend(q, k, v, mask, is_causal, self.scale, self.dropout if self.training else 0.0)
        return self.resid_dropout(self.o_proj(y.transpose(1, 2).reshape(B, T, self.n_head * self.v_dim)))
