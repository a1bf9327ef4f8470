"""The policy-gradient losses of the RL algorithms, per token, and how they are summed into one number.

Clipped surrogate (PPO, GRPO; clip-higher is DAPO's eps_high > eps_low):

    rho_t = pi(y_t) / pi_old(y_t)
    l_t   = -min(rho_t A_t, clip(rho_t, 1 - eps_low, 1 + eps_high) A_t)

A token is *clipped* when the clipped term is the smaller one: its gradient is then zero. On-policy
(first epoch, rho = 1) nothing is clipped and d l_t / d log pi(y_t) = -A_t: REINFORCE.

GSPO (Zheng et al., 2025) clips one ratio per sequence, the geometric mean of its token ratios,

    s_i = exp( (1/|o_i|) sum_t log rho_it ),

carried by every token as s_i * pi(y_t) / sg[pi(y_t)] so its value is s_i and its gradient flows
through each token's log-prob.

Aggregation turns per-token losses l_it (mask m_it) into the step's loss; each returns a (sum, units)
pair so the engine can divide by the units of the whole step (all micro-batches, all ranks):

    token-mean            sum_it m l / sum_it m                   (DAPO: long answers weigh more)
    seq-mean-token-mean   (1/N) sum_i [sum_t m l / sum_t m]       (GRPO as published)
    seq-sum-constant      (1/N) sum_i [sum_t m l] / C             (Dr. GRPO: C = the length limit)
"""

from __future__ import annotations

import torch

AGGREGATIONS = ("token-mean", "seq-mean-token-mean", "seq-sum-constant")


def clipped_surrogate(logp: torch.Tensor, old_logp: torch.Tensor, advantages: torch.Tensor, eps_low: float,
                      eps_high: float | None = None) -> tuple[torch.Tensor, torch.Tensor]:
    """(per-token loss, per-token clipped indicator) of the PPO objective with clip range [1-eps_low, 1+eps_high]."""
    high = eps_low if eps_high is None else eps_high
    ratio = torch.exp(logp - old_logp)
    unclipped = ratio * advantages
    clipped = torch.clamp(ratio, 1 - eps_low, 1 + high) * advantages
    return -torch.minimum(unclipped, clipped), (clipped < unclipped).to(logp.dtype)


def sequence_log_ratio(logp: torch.Tensor, old_logp: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
    """GSPO's per-token log-ratio: its value is log s_i (the sequence's mean log-ratio) at every token, and
    exp of it has derivative s_i with respect to each token's own log pi(y_t)."""
    m = mask.to(logp.dtype)
    mean = ((logp - old_logp) * m).sum(-1, keepdim=True) / m.sum(-1, keepdim=True).clamp(min=1)
    return mean.detach() + logp - logp.detach()


def gspo_surrogate(logp: torch.Tensor, old_logp: torch.Tensor, advantages: torch.Tensor, mask: torch.Tensor,
                   eps_low: float, eps_high: float | None = None) -> tuple[torch.Tensor, torch.Tensor]:
    """The clipped surrogate on GSPO's sequence ratio s_i (same value at every token of a sequence)."""
    token_log_ratio = sequence_log_ratio(logp, old_logp, mask)
    return clipped_surrogate(token_log_ratio, torch.zeros_like(logp), advantages, eps_low, eps_high)


def aggregate(per_token: torch.Tensor, mask: torch.Tensor, mode: str, constant: float = 1.0
              ) -> tuple[torch.Tensor, int]:
    """(summed loss, units) of per-token losses [N, T] under `mode`; the mean over a batch is sum / units."""
    m = mask.to(per_token.dtype)
    masked = per_token * m
    if mode == "token-mean":
        return masked.sum(), int(m.sum().item())
    per_sequence = masked.sum(-1)
    if mode == "seq-mean-token-mean":
        return (per_sequence / m.sum(-1).clamp(min=1)).sum(), int((m.sum(-1) > 0).sum().item())
    if mode == "seq-sum-constant":
        return per_sequence.sum() / constant, int((m.sum(-1) > 0).sum().item())
    raise ValueError(f"unknown aggregation {mode!r} (choose {', '.join(AGGREGATIONS)})")


def units(mask: torch.Tensor, mode: str) -> int:
    """The unit count `aggregate` divides by for `mask` (tokens or sequences)."""
    return int(mask.sum().item()) if mode == "token-mean" else int((mask.sum(-1) > 0).sum().item())


def clipped_value_loss(values: torch.Tensor, old_values: torch.Tensor, returns: torch.Tensor, clip: float
                       ) -> torch.Tensor:
    """PPO's value loss per token: 0.5 max((V - R)^2, (V_old + clip(V - V_old, +-clip) - R)^2)."""
    clipped = old_values + torch.clamp(values - old_values, -clip, clip)
    return 0.5 * torch.maximum((values - returns) ** 2, (clipped - returns) ** 2)


def token_entropy(logits: torch.Tensor) -> torch.Tensor:
    """Entropy of each position's distribution [N, T] (a metric: how much the policy still explores)."""
    logp = torch.log_softmax(logits.float(), dim=-1)
    return -(logp.exp() * logp).sum(-1)
