"""Generalised advantage estimation (Schulman et al., 2016) over masked response tokens.

With per-token rewards r_t, value estimates V_t and mask m_t (1 on response tokens):

    delta_t = r_t + gamma * V_{t+1} - V_t           (V after the last response token is 0)
    A_t     = delta_t + gamma * lambda * A_{t+1}    = sum_l (gamma lambda)^l delta_{t+l}
    R_t     = A_t + V_t                             (the value head's target)

lambda = 1 gives the Monte-Carlo return minus V; lambda = 0 the one-step TD error. Masked-out
positions are skipped: the recursion jumps over them, so a response's advantages depend only on
its own tokens, and they come out as 0.
"""

from __future__ import annotations

import torch


def gae(rewards: torch.Tensor, values: torch.Tensor, mask: torch.Tensor, gamma: float, lam: float
        ) -> tuple[torch.Tensor, torch.Tensor]:
    """(advantages, returns), both [N, T] like the inputs, 0 where mask is 0."""
    m = mask.to(values.dtype)
    advantages = torch.zeros_like(values)
    next_value = torch.zeros_like(values[:, 0])
    next_advantage = torch.zeros_like(values[:, 0])
    for t in reversed(range(values.shape[1])):
        delta = rewards[:, t] + gamma * next_value - values[:, t]
        here = delta + gamma * lam * next_advantage
        advantages[:, t] = here * m[:, t]
        keep = m[:, t] > 0  # a masked position passes the next token's value and advantage through
        next_value = torch.where(keep, values[:, t], next_value)
        next_advantage = torch.where(keep, here, next_advantage)
    return advantages, (advantages + values) * m
