"""Outcome advantages and whitening against numbers worked out by hand."""

from __future__ import annotations

import pytest
import torch

from tinylm.stages.rl.advantages import (
    group_advantages,
    moment_sums,
    reward_spread,
    rloo_advantages,
    whiten,
)
from tinylm.stages.rl.kl import kl_estimate


def test_group_advantages_with_and_without_std() -> None:
    # group 1: rewards 1, 0, 0, 1 -> mean 0.5, unbiased std sqrt(1/3); group 2: 2, 2, 2, 6 -> mean 3, std 2
    rewards = torch.tensor([1.0, 0.0, 0.0, 1.0, 2.0, 2.0, 2.0, 6.0])
    centred = group_advantages(rewards, 4, scale_by_std=False)
    assert centred.tolist() == [0.5, -0.5, -0.5, 0.5, -1.0, -1.0, -1.0, 3.0]
    scaled = group_advantages(rewards, 4, scale_by_std=True, eps=0.0)
    s = (1 / 3) ** 0.5
    assert scaled.tolist() == pytest.approx([0.5 / s, -0.5 / s, -0.5 / s, 0.5 / s, -0.5, -0.5, -0.5, 1.5])


def test_a_group_whose_rewards_agree_has_zero_advantage_and_no_spread() -> None:
    rewards = torch.tensor([1.0, 1.0, 1.0, 0.0, 1.0, 0.0])
    assert group_advantages(rewards, 3).tolist()[:3] == [0.0, 0.0, 0.0]
    assert reward_spread(rewards, 3).tolist() == [False, True]


def test_rloo_is_the_reward_minus_the_others_mean() -> None:
    rewards = torch.tensor([1.0, 0.0, 0.0, 3.0])  # one group of 4
    assert rloo_advantages(rewards, 4).tolist() == pytest.approx([1 - 1, 0 - 4 / 3, 0 - 4 / 3, 3 - 1 / 3])
    # = G / (G - 1) times the mean-centred reward
    assert torch.allclose(rloo_advantages(rewards, 4), group_advantages(rewards, 4, scale_by_std=False) * 4 / 3)


@pytest.mark.parametrize("value", [0.0, 1.0, -2.5])
def test_rloo_gives_zero_for_constant_rewards(value: float) -> None:
    assert rloo_advantages(torch.full((6,), value), 3).abs().max() == 0


def test_rloo_needs_two_samples() -> None:
    with pytest.raises(ValueError, match="at least 2"):
        rloo_advantages(torch.tensor([1.0]), 1)


def test_whitening_has_zero_mean_unit_variance_and_is_the_same_from_partial_sums() -> None:
    values = torch.tensor([[1.0, 2.0, 9.0], [3.0, 5.0, 9.0]])
    mask = torch.tensor([[1.0, 1.0, 0.0], [1.0, 1.0, 0.0]])  # the 9s are masked out
    out = whiten(values, moment_sums(values, mask), mask, eps=0.0)
    # masked-in values 1, 2, 3, 5: mean 2.75, unbiased variance (3.0625 + 0.5625 + 0.0625 + 5.0625) / 3
    std = ((3.0625 + 0.5625 + 0.0625 + 5.0625) / 3) ** 0.5
    assert out.flatten().tolist() == pytest.approx([-1.75 / std, -0.75 / std, 0.0, 0.25 / std, 2.25 / std, 0.0])
    # two micro-batches (or ranks) adding their sums give the same whitening as the whole batch
    parts = moment_sums(values[:1], mask[:1]) + moment_sums(values[1:], mask[1:])
    assert torch.equal(whiten(values, parts, mask, eps=0.0), out)
    scale_only = whiten(values, moment_sums(values, mask), mask, shift_mean=False, eps=0.0)
    assert scale_only.flatten().tolist() == pytest.approx([1 / std, 2 / std, 0.0, 3 / std, 5 / std, 0.0])


def test_k3_kl_is_never_negative_and_zero_only_at_equality() -> None:
    g = torch.Generator().manual_seed(0)
    logp, ref = -torch.rand(1000, generator=g) * 5, -torch.rand(1000, generator=g) * 5
    assert (kl_estimate(logp, ref, "k3") >= 0).all() and (kl_estimate(logp, ref, "k2") >= 0).all()
    assert kl_estimate(logp, logp, "k3").abs().max() == 0
    assert (kl_estimate(logp, ref, "k1") < 0).any()  # k1 is unbiased but not pointwise >= 0
    # k3 at log-ratio d = ref - logp = ln 2: 2 - ln 2 - 1
    assert kl_estimate(torch.tensor([0.0]), torch.tensor([0.6931471805599453]), "k3").item() == pytest.approx(
        1 - 0.6931471805599453)


def test_k3_is_an_unbiased_estimate_of_the_kl() -> None:
    p = torch.tensor([0.5, 0.3, 0.2])
    q = torch.tensor([0.2, 0.5, 0.3])
    exact = (p * (p / q).log()).sum()
    per_token = kl_estimate(p.log(), q.log(), "k3")
    assert (p * per_token).sum().item() == pytest.approx(exact.item(), abs=1e-6)  # E_p[k3] = KL(p || q)
