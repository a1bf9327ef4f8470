"""Causal self-attention with grouped key/value heads, as in Llama 3, Qwen 3, Gemma 3 and Mistral.

`n_kv_head` sets how many key/value heads the `n_head` query heads share:
n_kv_head == n_head is multi-head attention (MHA), 1 is multi-query (MQA), anything in between is
grouped-query (GQA). Fewer KV heads mean a smaller KV cache at almost no quality cost.

Options, each one line below: QK-norm (RMSNorm on every query and key head before RoPE, Qwen 3 /
Gemma 3: keeps attention logits from growing), a sliding window (a token sees only the last
`sliding_window` tokens, Mistral / Gemma), and a sigmoid output gate (each head's output is scaled
by sigmoid(W_g x), Qwen3-Next: lets a head switch itself off and removes attention sinks).
The attention itself is `F.scaled_dot_product_attention`, which picks flash / memory-efficient
kernels when it can. On a CPU, where those kernels are slow, a training run may switch a model to
`kernel = "blockwise"` (models/modern/blockwise_attention.py) after measuring it faster
(runtime/attention_policy.py); it computes the same function (in bf16 with its scores rounded to
bf16, as eager attention does), and only without a KV cache.
"""

from __future__ import annotations

import torch
from torch import nn

from tinylm.config import ModelConfig
from tinylm.models.attend import Attend
from tinylm.models.modern.blockwise_attention import blockwise_causal_attention
from tinylm.models.modern.kv_cache import KVCache
from tinylm.models.modern.norm import RMSNorm
from tinylm.models.modern.rope import apply_rope

ATTENTION_KERNELS: tuple[str, ...] = ("sdpa", "blockwise")


class Attention(nn.Module):
    kernel: str = "sdpa"  # "blockwise": models/modern/blockwise_attention.py, for passes without a KV cache

    def __init__(self, config: ModelConfig) -> None:
        super().__init__()
        self.n_head, self.n_kv_head, self.head_dim = config.n_head, config.kv_heads, config.dim_per_head
        q_width, kv_width = self.n_head * self.head_dim, self.n_kv_head * self.head_dim
        self.q_proj = nn.Linear(config.n_embed, q_width, bias=False)
        self.k_proj = nn.Linear(config.n_embed, kv_width, bias=False)
        self.v_proj = nn.Linear(config.n_embed, kv_width, bias=False)
        self.o_proj = nn.Linear(q_width, config.n_embed, bias=False)  # writes into the residual stream
        self.q_norm = RMSNorm(self.head_dim, config.norm_eps) if config.qk_norm else None
        self.k_norm = RMSNorm(self.head_dim, config.norm_eps) if config.qk_norm else None
        self.gate_proj = nn.Linear(config.n_embed, q_width, bias=False) if config.attn_output_gate else None
        self.dropout = config.dropout
        self.resid_dropout = nn.Dropout(config.dropout)
        self.attend = Attend()  # F.scaled_dot_product_attention, where inspection can see q and k

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
        q = self.q_proj(x).view(B, T, self.n_head, self.head_dim)
        k = self.k_proj(x).view(B, T, self.n_kv_head, self.head_dim)
        v = self.v_proj(x).view(B, T, self.n_kv_head, self.head_dim)
        if self.q_norm is not None:
            q, k = self.q_norm(q), self.k_norm(k)
        q, k, v = q.transpose(1, 2), k.transpose(1, 2), v.transpose(1, 2)  # [B, heads, T, head_dim]
        q, k = apply_rope(q, cos, sin), apply_rope(k, cos, sin)
        dropout = self.dropout if self.training else 0.0
        if self.kernel == "blockwise" and cache is None:  # queries and keys both at slots 0..T-1
            y = blockwise_causal_attention(q, k, v, mask, dropout)
        else:
            if cache is not None:  # append this step's keys/values, attend over everything cached
                k = cache.write(layer, "k", k.transpose(1, 2)).transpose(1, 2)
                v = cache.write(layer, "v", v.transpose(1, 2)).transpose(1, 2)
            if self.n_kv_head != self.n_head:  # each KV head serves n_head / n_kv_head query heads
                repeats = self.n_head // self.n_kv_head
                k, v = k.repeat_interleave(repeats, dim=1), v.repeat_interleave(repeats, dim=1)
            y = self.attend(q, k, v, mask, is_causal, None, dropout)
        y = y.transpose(1, 2).reshape(B, T, self.n_head * self.head_dim)
        if self.gate_proj is not None:
            y = y * torch.sigmoid(self.gate_proj(x))
        return self.resid_dropout(self.o_proj(y))
