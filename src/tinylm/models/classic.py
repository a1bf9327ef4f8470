"""The classic decoder: GPT-2 as it was in 2019, the baseline every modern idea is measured against.

    tokens + learned positions -> [LayerNorm -> attention, LayerNorm -> ReLU (or GELU) MLP 4x] x n_blocks
                               -> LayerNorm -> lm_head (own matrix)

Attention is written out by hand (scores, causal mask, softmax, weighted sum) because this is the
model you read to understand attention; `attn_impl="sdpa"` swaps in the fused kernel with the same
result, so speed comparisons against the modern model are fair. Which keys a query may see (causal,
no padding, its own conversation in a packed row) comes from the same `attention_mask` as the
modern model's.

The head has no bias by default, as GPT-2's has none, so a trained model exports to
`GPT2LMHeadModel` as it is; `head_bias=True` (the seed's `13m` preset) adds one.
"""

from __future__ import annotations

import math

import torch
import torch.nn.functional as F
from torch import nn

from tinylm.config import ModelConfig
from tinylm.models.accounting import count_params, training_flops_per_token
from tinylm.models.attend import Attend
from tinylm.models.init import init_gpt2
from tinylm.models.loss import output_head_loss, soft_cap
from tinylm.models.modern.mask import attention_mask


class CausalSelfAttention(nn.Module):
    def __init__(self, config: ModelConfig) -> None:
        super().__init__()
        self.n_head, self.head_dim = config.n_head, config.n_embed // config.n_head
        self.impl = config.attn_impl
        self.qkv = nn.Linear(config.n_embed, 3 * config.n_embed, bias=config.qkv_bias)
        self.o_proj = nn.Linear(config.n_embed, config.n_embed, bias=True)  # writes into the residual stream
        self.attn_dropout = nn.Dropout(config.dropout)
        self.resid_dropout = nn.Dropout(config.dropout)
        self.attend = Attend()  # the fused path: F.scaled_dot_product_attention, where inspection can see q and k

    def forward(self, x: torch.Tensor, allowed: torch.Tensor | None = None) -> torch.Tensor:
        """`allowed` [B or 1, 1, T, T] (True = may attend) from `attention_mask`; None = plain causal."""
        B, T, C = x.shape
        q, k, v = self.qkv(x).split(C, dim=-1)
        q, k, v = (t.view(B, T, self.n_head, self.head_dim).transpose(1, 2) for t in (q, k, v))  # [B, H, T, hd]
        if self.impl == "manual":
            if allowed is None:
                allowed = torch.ones(T, T, dtype=torch.bool, device=x.device).tril()  # query i sees keys 0..i
            scores = (q @ k.transpose(-2, -1)) / math.sqrt(self.head_dim)  # [B, H, T, T]
            scores = scores.masked_fill(~allowed, float("-inf"))
            y = self.attn_dropout(F.softmax(scores, dim=-1)) @ v
        else:
            dropout = self.attn_dropout.p if self.training else 0.0
            y = self.attend(q, k, v, allowed, allowed is None, None, dropout)
        y = y.transpose(1, 2).reshape(B, T, C)
        return self.resid_dropout(self.o_proj(y))


class ClassicMLP(nn.Module):
    """proj(act(hidden(x))), 4x wide, with biases; act is ReLU, or GPT-2's own tanh-approximated GELU.

    The seed's classic model uses ReLU. GELU (`mlp_activation="gelu"`) is what GPT-2 shipped with and
    the only activation llama.cpp's gpt2 graph runs, so it is the classic model that exports to GGUF.
    """

    def __init__(self, config: ModelConfig) -> None:
        super().__init__()
        self.hidden = nn.Linear(config.n_embed, 4 * config.n_embed)
        self.proj = nn.Linear(4 * config.n_embed, config.n_embed)  # writes into the residual stream
        self.dropout = nn.Dropout(config.dropout)
        self.gelu = config.mlp_activation == "gelu"

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        h = self.hidden(x)
        h = F.gelu(h, approximate="tanh") if self.gelu else F.relu(h)
        return self.dropout(self.proj(h))


class ClassicBlock(nn.Module):
    def __init__(self, config: ModelConfig) -> None:
        super().__init__()
        self.ln1 = nn.LayerNorm(config.n_embed, eps=config.layer_norm_eps)
        self.attn = CausalSelfAttention(config)
        self.ln2 = nn.LayerNorm(config.n_embed, eps=config.layer_norm_eps)
        self.mlp = ClassicMLP(config)

    def forward(self, x: torch.Tensor, allowed: torch.Tensor | None = None) -> torch.Tensor:
        x = x + self.attn(self.ln1(x), allowed)
        return x + self.mlp(self.ln2(x))


class ClassicGPT(nn.Module):
    def __init__(self, config: ModelConfig) -> None:
        super().__init__()
        if config.arch != "classic":
            raise ValueError(f"invalid config: arch={config.arch!r}: ClassicGPT needs arch='classic'")
        self.config = config
        self.token_embed = nn.Embedding(config.vocab_size, config.n_embed)
        self.pos_embed = nn.Embedding(config.context_length, config.n_embed)
        self.dropout = nn.Dropout(config.dropout)
        self.blocks = nn.ModuleList(ClassicBlock(config) for _ in range(config.n_blocks))
        self.ln_f = nn.LayerNorm(config.n_embed, eps=config.layer_norm_eps)
        self.lm_head = nn.Linear(config.n_embed, config.vocab_size, bias=config.head_bias)
        if config.tie_embeddings:
            self.lm_head.weight = self.token_embed.weight
        init_gpt2(self, config.n_blocks, config.init_std, config.zero_init_head)

    def forward_hidden(
        self,
        idx: torch.Tensor,
        cache: None = None,
        positions: torch.Tensor | None = None,
        valid: torch.Tensor | None = None,
        segments: torch.Tensor | None = None,
    ) -> torch.Tensor:
        """Final-LayerNorm hidden states [B, T, n_embed]; the classic model has no KV cache.

        `positions` [T] or [B, T] index the learned position table (packed rows restart them at 0 per
        conversation), `valid` [B, T] is False for left padding, `segments` [B, T] confine attention.
        """
        if cache is not None:
            raise ValueError("the classic model has no KV cache; call forward_hidden without one")
        T = idx.shape[1]
        if self.config.context_length < T:
            raise ValueError(f"sequence of {T} tokens exceeds context_length {self.config.context_length}")
        if positions is None:
            positions = torch.arange(T, device=idx.device)
        allowed, _ = attention_mask(T, 0, None, valid, idx.device, segments)
        x = self.dropout(self.token_embed(idx) + self.pos_embed(positions))
        for block in self.blocks:
            if self.config.gradient_checkpointing and self.training:
                x = torch.utils.checkpoint.checkpoint(block, x, allowed, use_reentrant=False)
            else:
                x = block(x, allowed)
        return self.ln_f(x)

    def forward(
        self,
        idx: torch.Tensor,
        targets: torch.Tensor | None = None,
        return_logits: bool = True,
        positions: torch.Tensor | None = None,
        segments: torch.Tensor | None = None,
        reduction: str = "mean",
        logits_at: torch.Tensor | None = None,
        z_loss: float = 0.0,
    ) -> tuple[torch.Tensor | None, torch.Tensor | None]:
        """(logits [B, T, vocab], cross-entropy or None); arguments as in ModernGPT.forward."""
        hidden = self.forward_hidden(idx, positions=positions, segments=segments)
        if logits_at is not None:
            hidden, targets = hidden[logits_at], None if targets is None else targets[logits_at]
        return output_head_loss(self.lm_head, hidden, targets, return_logits, reduction, z_loss,
                                self.config.logit_softcap)

    def logits(self, hidden: torch.Tensor) -> torch.Tensor:
        """The output head on final hidden states, soft-capped if the config says: what decoding samples from."""
        return soft_cap(self.lm_head(hidden), self.config.logit_softcap)

    def num_params(self, non_embedding: bool = False, active: bool = False) -> int:
        return count_params(self, non_embedding, active)

    def flops_per_token(self, seq_len: int | None = None) -> int:
        return training_flops_per_token(self, seq_len or self.config.context_length)
