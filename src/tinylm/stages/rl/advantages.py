"""Outcome advantages: one number per sampled response, from its reward and its group's.

Rollouts are laid out group by group: the G responses to one prompt are rows g*G .. g*G + G-1, so
a reshape to [groups, G] gives each prompt's rewards in one row.

    GRPO      A_i = (r_i - mean_g r) / (std_g r + eps)      (std: the unbiased one, as torch.std)
    Dr. GRPO  A_i =  r_i - mean_g r                         (no std: hard and easy prompts weigh alike)
    RLOO      A_i =  r_i - mean_{j != i} r_j = G/(G-1) (r_i - mean_g r)
    REINFORCE++ with baseline:  A_i = whiten(r_i - mean_g r) over the whole batch

Whitening uses batch statistics: under gradient accumulation and torchrun "the batch" is every
rollout of the optimizer step, so `whiten` takes the (sum, sum of squares, count) the caller has
summed over micro-batches and ranks.
"""

from __future__ import annotations

import torch

EPS = 1e-6


def _groups(rewards: torch.Tensor, group_size: int) -> torch.Tensor:
    if rewards.ndim != 1 or rewards.numel() % group_size:
        raise ValueError(f"{rewards.numel()} rewards do not split into groups of {group_size}")
    return rewards.view(-1, group_size)


def group_advantages(rewards: torch.Tensor, group_size: int, scale_by_std: bool = True,
                     eps: float = EPS) -> torch.Tensor:
    """GRPO's advantage (scale_by_std=True) or Dr. GRPO's mean-centred reward (False), per response."""
    grouped = _groups(rewards, group_size)
    centred = grouped - grouped.mean(dim=1, keepdim=True)
    if scale_by_std:
        centred = centred / (grouped.std(dim=1, keepdim=True) + eps)
    return centred.reshape(-1)


def rloo_advantages(rewards: torch.Tensor, group_size: int) -> torch.Tensor:
    """Each response's reward minus the mean of the *other* responses to its prompt (needs G >= 2)."""
    if group_size < 2:
        raise ValueError("RLOO needs at least 2 samples per prompt")
    grouped = _groups(rewards, group_size)
    others = (grouped.sum(dim=1, keepdim=True) - grouped) / (group_size - 1)
    return (grouped - others).reshape(-1)


def reward_spread(rewards: torch.Tensor, group_size: int) -> torch.Tensor:
    """Per group: True when its rewards are not all equal (the group carries a learning signal)."""
    grouped = _groups(rewards, group_size)
    return grouped.amax(dim=1) > grouped.amin(dim=1)


def moment_sums(values: torch.Tensor, mask: torch.Tensor | None = None) -> torch.Tensor:
    """(sum, sum of squares, count) of the masked-in values, float64: add these over micro-batches and ranks."""
    v = values.double()
    m = torch.ones_like(v) if mask is None else mask.double()
    return torch.stack([(v * m).sum(), (v * v * m).sum(), m.sum()])


def whiten(values: torch.Tensor, sums: torch.Tensor, mask: torch.Tensor | None = None, shift_mean: bool = True,
           eps: float = 1e-8) -> torch.Tensor:
    """(values - mean) / std with the batch mean and (unbiased) variance given as `moment_sums`.

    shift_mean=False only rescales (PPO keeps the advantages' sign). Masked-out entries become 0."""
    total, squares, count = sums.tolist()
    mean = total / count
    var = (squares - count * mean * mean) / max(count - 1, 1)
    out = values.double()
    if shift_mean:
        out = out - mean
    out = out / (max(var, 0.0) ** 0.5 + eps)
    if mask is not None:
        out = out * mask.double()
    return out.to(values.dtype)
