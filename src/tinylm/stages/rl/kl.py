"""Per-token estimators of KL(pi || pi_ref) from samples of pi: k1, k2 and k3 (Schulman, 2020).

With log-ratio d = log pi_ref(y) - log pi(y) for a token y drawn from pi:

    k1 = -d                      unbiased, but negative on many samples (high variance)
    k2 = d^2 / 2                 biased, always >= 0, low variance
    k3 = exp(d) - d - 1          unbiased (E_pi[exp(d)] = 1) and always >= 0, since e^x >= 1 + x

GRPO puts beta * k3 in the loss; PPO folds -beta * k1 into the per-token reward instead.
"""

from __future__ import annotations

import torch

KL_ESTIMATORS = ("k1", "k2", "k3")


def kl_k1(logp: torch.Tensor, ref_logp: torch.Tensor) -> torch.Tensor:
    return logp - ref_logp


def kl_k2(logp: torch.Tensor, ref_logp: torch.Tensor) -> torch.Tensor:
    return 0.5 * (ref_logp - logp) ** 2


def kl_k3(logp: torch.Tensor, ref_logp: torch.Tensor) -> torch.Tensor:
    d = ref_logp - logp
    return torch.exp(d) - d - 1


def kl_estimate(logp: torch.Tensor, ref_logp: torch.Tensor, kind: str = "k3") -> torch.Tensor:
    """The per-token estimate `kind` (k1, k2 or k3) of KL(pi || pi_ref)."""
    return {"k1": kl_k1, "k2": kl_k2, "k3": kl_k3}[kind](logp, ref_logp)
