"""Mixture of experts: many SwiGLU experts, each token processed by only the top-k of them.

A router scores every expert for every token (softmax over experts); the token goes to the k best,
and their outputs are mixed with the router's probabilities (renormalized over the k when
`moe_norm_topk_prob`, as Qwen3-MoE does). Shared experts (DeepSeek, Qwen2-MoE) see every token and
hold what all tokens need, optionally scaled by a sigmoid gate. Total parameters grow with the
number of experts while the compute per token ("active parameters") grows only with k.

Left alone, a router collapses onto a few experts. The load-balancing loss (Switch Transformer)

    aux = n_experts * sum_i f_i * P_i

(f_i: fraction of routed slots that went to expert i, P_i: mean router probability of expert i) is
smallest when both are uniform; it is added to the training loss, scaled by `moe_aux_loss_coef`,
and its gradient reaches the router through P_i. Per-expert token counts of the last forward pass
are kept in `tokens_per_expert` for monitoring.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import nn

from tinylm.config import ModelConfig
from tinylm.models.modern.mlp import SwiGLU


class MixtureOfExperts(nn.Module):
    def __init__(self, config: ModelConfig) -> None:
        super().__init__()
        self.n_experts, self.top_k = config.n_experts, config.n_experts_per_token
        self.norm_topk_prob, self.aux_coef = config.moe_norm_topk_prob, config.moe_aux_loss_coef
        self.router = nn.Linear(config.n_embed, config.n_experts, bias=False)
        self.experts = nn.ModuleList(SwiGLU(config.n_embed, config.expert_width) for _ in range(config.n_experts))
        shared_width = config.expert_width * config.n_shared_experts
        self.shared = SwiGLU(config.n_embed, shared_width) if config.n_shared_experts else None
        self.shared_gate = nn.Linear(config.n_embed, 1, bias=False) if config.moe_shared_expert_gate else None
        self.dropout = nn.Dropout(config.dropout)
        self.register_buffer("tokens_per_expert", torch.zeros(config.n_experts, dtype=torch.long), persistent=False)

    def forward(self, x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """(output like x, load-balancing loss already scaled by its coefficient)."""
        shape = x.shape
        tokens = x.reshape(-1, shape[-1])
        probs = F.softmax(self.router(tokens).float(), dim=-1)  # [N, n_experts]
        weights, chosen = probs.topk(self.top_k, dim=-1)  # [N, k]
        if self.norm_topk_prob:
            weights = weights / weights.sum(dim=-1, keepdim=True)
        weights = weights.to(x.dtype)

        out = torch.zeros_like(tokens)
        for e, expert in enumerate(self.experts):
            token_idx, slot = torch.where(chosen == e)
            if token_idx.numel():
                out.index_add_(0, token_idx, expert(tokens[token_idx]) * weights[token_idx, slot, None])
        if self.shared is not None:
            shared = self.shared(tokens)
            if self.shared_gate is not None:
                shared = torch.sigmoid(self.shared_gate(tokens)) * shared
            out = out + shared

        counts = torch.bincount(chosen.flatten(), minlength=self.n_experts)
        self.tokens_per_expert.copy_(counts)
        routed_fraction = counts.float() / chosen.numel()
        aux = self.n_experts * (routed_fraction * probs.mean(dim=0)).sum()
        return self.dropout(out.view(shape)), self.aux_coef * aux
