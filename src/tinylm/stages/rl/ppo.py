"""PPO for language models (Ouyang et al., 2022): a value head, GAE, value clipping, KL-shaped rewards.

Per response token t (mask m_t), with the sampling policy pi_old and the frozen reference pi_ref:

    r_t    = -beta (log pi_old(y_t) - log pi_ref(y_t))  + [t is the last token] * score
    A_t, R_t = GAE(r, V_old; gamma, lambda)                  (gae.py), A whitened over the batch
    loss_t = clipped surrogate(A_t)  +  c_v * 0.5 max((V_t - R_t)^2, (clip(V_t, V_old +- eps_v) - R_t)^2)

The value head is one linear layer on the policy's final hidden state (shared trunk), started at zero
so the first values say nothing. `PolicyWithValue` is what the engine trains: its forward returns the
logits and the values, so it works unchanged under DDP.
"""

from __future__ import annotations

import torch
from torch import nn

from tinylm.stages.rl.algorithm import Algorithm

PPO = Algorithm("ppo", advantage="gae", aggregation="token-mean", beta=0.05, value_head=True, min_group=1,
                summary="value head, GAE, value clipping, KL-shaped reward")
FAMILY = (PPO,)  # what algorithms.py registers, in this order
VALUE_PREFIX = "value_head."


class PolicyWithValue(nn.Module):
    """A policy model plus a scalar value per position; forward(ids) -> (logits, values)."""

    def __init__(self, policy: nn.Module) -> None:
        super().__init__()
        self.policy = policy
        self.config = policy.config
        self.value_head = nn.Linear(policy.config.n_embed, 1)
        nn.init.zeros_(self.value_head.weight)
        nn.init.zeros_(self.value_head.bias)

    def forward(self, ids: torch.Tensor, logits_at: torch.Tensor | None = None) -> tuple[torch.Tensor, torch.Tensor]:
        """(logits, values) [N, L, ...], or [n, ...] at the `logits_at` positions only (the response)."""
        hidden = self.policy.forward_hidden(ids)
        if logits_at is not None:
            hidden = hidden[logits_at]
        return self.policy.logits(hidden), self.value_head(hidden).squeeze(-1)

    def num_params(self, non_embedding: bool = False, active: bool = False) -> int:
        return self.policy.num_params(non_embedding, active) + sum(p.numel() for p in self.value_head.parameters())

    def flops_per_token(self, seq_len: int | None = None) -> int:
        return self.policy.flops_per_token(seq_len)


def token_rewards(scores: torch.Tensor, old_logp: torch.Tensor, ref_logp: torch.Tensor | None, mask: torch.Tensor,
                  beta: float) -> torch.Tensor:
    """PPO's per-token reward [N, T]: the KL penalty on every response token, the score on the last one."""
    m = mask.to(old_logp.dtype)
    rewards = torch.zeros_like(old_logp)
    if ref_logp is not None and beta:
        rewards = -beta * (old_logp - ref_logp) * m
    positions = torch.arange(m.shape[1], device=m.device).expand_as(m)
    last = torch.where(m > 0, positions, -1).amax(dim=1)
    rows = torch.arange(m.shape[0], device=m.device)
    rewards[rows, last] += scores.to(rewards.dtype)
    return rewards
