"""Parameter and FLOP accounting shared by both architectures.

- total: every parameter once (a tied embedding/head matrix counts once);
- non-embedding: without the token (and position) embedding tables; an untied output head stays in,
  because it is a matmul every token pays for;
- active: what one token actually uses, i.e. for a mixture of experts only k routed experts (plus
  the shared ones) out of n_experts.

Training FLOPs per token are 6 * (active matmul parameters: non-embedding plus a tied head), for
the forward and backward passes of every matrix multiply, plus the attention scores and weighted
sum, which grow with context:
6 * n_blocks * seq_len * n_head * (qk_dim + v_dim) (PaLM's estimate, not halved for causality).
"""

from __future__ import annotations

from torch import nn

from tinylm.config import ModelConfig


def count_params(model: nn.Module, non_embedding: bool = False, active: bool = False) -> int:
    config: ModelConfig = model.config  # type: ignore[assignment]
    total = sum(p.numel() for p in model.parameters())
    if active and config.is_moe:
        per_expert = sum(p.numel() for p in model.blocks[0].mlp.experts[0].parameters())
        total -= config.n_blocks * (config.n_experts - config.n_experts_per_token) * per_expert
    if non_embedding:
        total -= model.token_embed.weight.numel()
        if getattr(model, "pos_embed", None) is not None:
            total -= model.pos_embed.weight.numel()
    return total


def attention_flops_per_token(config: ModelConfig, seq_len: int) -> int:
    context = min(seq_len, config.sliding_window) if config.sliding_window else seq_len
    if config.attention == "mla":
        per_head = config.nope_dim + config.qk_rope_head_dim + config.value_dim
    else:
        per_head = 2 * config.dim_per_head
    return 6 * config.n_blocks * context * config.n_head * per_head


def matmul_params(model: nn.Module) -> int:
    """N of 6N: the active non-embedding parameters, plus a tied table, which is also the output head (a matmul
    every token pays for)."""
    n = count_params(model, non_embedding=True, active=True)
    if model.config.tie_embeddings:
        n += model.token_embed.weight.numel()
    return n


def training_flops_per_token(model: nn.Module, seq_len: int) -> int:
    return 6 * matmul_params(model) + attention_flops_per_token(model.config, seq_len)
