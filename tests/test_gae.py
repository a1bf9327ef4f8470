"""GAE against a brute-force sum and hand-worked cases, with masking."""

from __future__ import annotations

import itertools

import pytest
import torch

from tinylm.stages.rl.gae import gae


def brute_force(rewards: list[float], values: list[float], gamma: float, lam: float) -> list[float]:
    """A_t = sum_l (gamma lambda)^l delta_{t+l}, written out term by term (V after the end is 0)."""
    T = len(rewards)
    v = [*values, 0.0]
    deltas = [rewards[t] + gamma * v[t + 1] - v[t] for t in range(T)]
    return [sum((gamma * lam) ** (k - t) * deltas[k] for k in range(t, T)) for t in range(T)]


@pytest.mark.parametrize(("gamma", "lam"), list(itertools.product([0.0, 0.5, 1.0], repeat=2)))
def test_gae_equals_the_brute_force_sum(gamma: float, lam: float) -> None:
    g = torch.Generator().manual_seed(int(gamma * 10 + lam * 100))
    rewards, values = torch.randn(3, 6, generator=g, dtype=torch.float64), torch.randn(3, 6, generator=g,
                                                                                        dtype=torch.float64)
    adv, returns = gae(rewards, values, torch.ones(3, 6), gamma, lam)
    for i in range(3):
        assert adv[i].tolist() == pytest.approx(brute_force(rewards[i].tolist(), values[i].tolist(), gamma, lam))
    assert torch.allclose(returns, adv + values)


def test_gae_at_lambda_one_is_the_return_minus_the_value() -> None:
    rewards = torch.tensor([[0.0, 0.0, 1.0]])
    values = torch.tensor([[0.5, 0.25, 0.75]])
    adv, returns = gae(rewards, values, torch.ones(1, 3), gamma=1.0, lam=1.0)
    assert adv[0].tolist() == pytest.approx([0.5, 0.75, 0.25])  # the return is 1 everywhere
    assert returns[0].tolist() == pytest.approx([1.0, 1.0, 1.0])


def test_gae_at_lambda_095_by_hand() -> None:
    rewards = torch.tensor([[0.0, 1.0]])
    values = torch.tensor([[0.5, 0.5]])
    adv, _ = gae(rewards, values, torch.ones(1, 2), gamma=1.0, lam=0.95)
    # delta_1 = 1 - 0.5 = 0.5; delta_0 = 0 + 0.5 - 0.5 = 0; A_0 = 0 + 0.95 * 0.5
    assert adv[0].tolist() == pytest.approx([0.475, 0.5])


def test_masked_positions_are_skipped_and_get_zero() -> None:
    """A prompt position before the response and padding after it change nothing of the response's advantages."""
    rewards = torch.tensor([[9.0, 0.0, 1.0, 7.0]])
    values = torch.tensor([[3.0, 0.5, 0.5, 4.0]])
    mask = torch.tensor([[0.0, 1.0, 1.0, 0.0]])
    adv, returns = gae(rewards, values, mask, gamma=1.0, lam=0.95)
    assert adv[0].tolist() == pytest.approx([0.0, 0.475, 0.5, 0.0])
    assert returns[0, [0, 3]].tolist() == [0.0, 0.0]
    gapped = torch.tensor([[1.0, 0.0, 1.0, 1.0]])  # a hole inside: the recursion jumps over it
    r2 = torch.tensor([[0.0, 5.0, 0.0, 1.0]])
    v2 = torch.tensor([[0.2, 9.0, 0.3, 0.4]])
    adv2, _ = gae(r2, v2, gapped, gamma=1.0, lam=1.0)
    expected = brute_force([0.0, 0.0, 1.0], [0.2, 0.3, 0.4], 1.0, 1.0)
    assert adv2[0, [0, 2, 3]].tolist() == pytest.approx(expected) and adv2[0, 1] == 0
