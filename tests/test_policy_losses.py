"""The policy losses against hand-worked cases, and GRPO's first-epoch gradient against plain REINFORCE."""

from __future__ import annotations

import pytest
import torch

from test_rollout import PROMPTS, micro_model
from tinylm.inference.sampling import SamplingParams
from tinylm.stages.rl.advantages import group_advantages
from tinylm.stages.rl.policy_losses import (
    aggregate,
    clipped_surrogate,
    clipped_value_loss,
    gspo_surrogate,
    units,
)
from tinylm.stages.rl.rollout import policy_logprobs, sample_rollouts

pytestmark = pytest.mark.usefixtures("one_thread")


def test_the_three_aggregations_by_hand() -> None:
    """Two responses: losses 1, 2, 3 (three tokens) and 4 (one token, then padding)."""
    per_token = torch.tensor([[1.0, 2.0, 3.0], [4.0, 8.0, 8.0]])
    mask = torch.tensor([[1.0, 1.0, 1.0], [1.0, 0.0, 0.0]])
    cases = {"token-mean": 10 / 4,  # (1 + 2 + 3 + 4) / 4 tokens = 2.5
             "seq-mean-token-mean": (2 + 4) / 2,  # mean of the per-response means 2 and 4 = 3.0
             "seq-sum-constant": (6 + 4) / (2 * 10)}  # sums 6 and 4 over C = 10, averaged over 2 = 0.5
    for mode, expected in cases.items():
        total, n = aggregate(per_token, mask, mode, constant=10.0)
        assert total.item() / n == pytest.approx(expected) and n == units(mask, mode)
    assert [aggregate(per_token, mask, m, 10.0)[1] for m in cases] == [4, 2, 2]


RATIOS = torch.tensor([0.5, 0.9, 1.1, 1.25, 1.5])


@pytest.mark.parametrize(("advantage", "eps_high", "loss", "clipped"), [
    (1.0, None, [-0.5, -0.9, -1.1, -1.2, -1.2], [0, 0, 0, 1, 1]),  # A > 0: capped at 1 + eps
    (1.0, 0.28, [-0.5, -0.9, -1.1, -1.25, -1.28], [0, 0, 0, 0, 1]),  # clip-higher lets 1.25 through
    (-1.0, None, [0.8, 0.9, 1.1, 1.25, 1.5], [1, 0, 0, 0, 0]),  # A < 0: floored at 1 - eps
])
def test_clipped_surrogate_and_clip_fraction(advantage: float, eps_high: float | None, loss: list[float],
                                             clipped: list[int]) -> None:
    logp = RATIOS.log().requires_grad_()
    out, clip = clipped_surrogate(logp, torch.zeros(5), torch.full((5,), advantage), 0.2, eps_high)
    assert out.tolist() == pytest.approx(loss) and clip.tolist() == clipped
    out.sum().backward()
    assert logp.grad is not None
    assert (logp.grad[clip.bool()] == 0).all()  # a clipped token gets no gradient
    assert logp.grad[~clip.bool()].tolist() == pytest.approx((-advantage * RATIOS[~clip.bool()]).tolist())


def test_gspo_on_policy_loss_is_zero_and_each_token_gets_a_over_n_times_length() -> None:
    """Two 4-token responses with advantages +1 and -1, on-policy: the loss is 0 and d loss / d log pi(y_t)
    = -A_i s_i / (N |o_i|) = -+1 / (2 * 4) = -+0.125 per token."""
    logp = torch.log(torch.tensor([[0.5, 0.4, 0.3, 0.2], [0.6, 0.1, 0.7, 0.9]])).requires_grad_()
    mask = torch.ones(2, 4)
    adv = torch.tensor([[1.0] * 4, [-1.0] * 4])
    per_token, clipped = gspo_surrogate(logp, logp.detach(), adv, mask, 3e-4, 4e-4)
    total, n = aggregate(per_token, mask, "seq-mean-token-mean")
    loss = total / n
    assert loss.item() == 0.0 and clipped.sum() == 0
    loss.backward()
    assert logp.grad is not None
    assert logp.grad.tolist() == [[-0.125] * 4, [0.125] * 4]


def test_gspo_clips_the_whole_sequence_on_its_geometric_mean_ratio() -> None:
    old = torch.zeros(1, 2)
    logp = torch.tensor([[0.2, -0.1]])  # token ratios e^0.2, e^-0.1: geometric mean e^0.05 > 1 + 4e-4
    per_token, clipped = gspo_surrogate(logp, old, torch.ones(1, 2), torch.ones(1, 2), 3e-4, 4e-4)
    assert clipped.tolist() == [[1.0, 1.0]] and per_token[0].tolist() == pytest.approx([-(1 + 4e-4)] * 2)


def test_ppo_value_loss_by_hand() -> None:
    values = torch.tensor([1.0, 0.0, 0.5])
    old = torch.tensor([0.5, 0.5, 0.5])
    returns = torch.tensor([2.0, 0.0, 1.0])
    loss = clipped_value_loss(values, old, returns, clip=0.2)
    # 1: unclipped (1 - 2)^2 = 1, clipped V = 0.7: (0.7 - 2)^2 = 1.69 -> max 1.69
    # 2: unclipped 0, clipped V = 0.3: 0.09 -> 0.09;   3: V = old: 0.25 both
    assert loss.tolist() == pytest.approx([0.5 * 1.69, 0.5 * 0.09, 0.5 * 0.25])


def test_ppo_policy_loss_by_hand() -> None:
    logp = torch.log(torch.tensor([1.3, 0.7]))
    out, clip = clipped_surrogate(logp, torch.zeros(2), torch.tensor([2.0, 3.0]), 0.2)
    assert out.tolist() == pytest.approx([-2.4, -2.1]) and clip.tolist() == [1.0, 0.0]  # min(2.6, 2.4), min(2.1, 2.4)


def test_grpo_first_epoch_gradient_is_the_reinforce_gradient() -> None:
    """One epoch, beta = 0: the clipped surrogate's gradient is -(1/N) sum_t A_t grad log pi(y_t), N tokens."""
    model = micro_model(qk_norm=True)
    rollouts = sample_rollouts(model, PROMPTS, 4, 6, SamplingParams(temperature=0.9), seeds=[1, 2, 3, 4],
                               stop_ids=[0], pad_id=0)
    rewards = torch.tensor([float(len(r) % 3) for r in rollouts.responses])
    adv = group_advantages(rewards, 4)[:, None] * rollouts.response_mask
    model.train()

    def grads(loss_of: object) -> list[torch.Tensor]:
        model.zero_grad()
        logp, _ = policy_logprobs(model, rollouts.ids, 0.9)
        loss_of(logp).backward()  # type: ignore[operator]
        return [p.grad.clone() for p in model.parameters() if p.grad is not None]

    def grpo(logp: torch.Tensor) -> torch.Tensor:
        per_token, _ = clipped_surrogate(logp, rollouts.logprobs, adv, 0.2)
        total, n = aggregate(per_token, rollouts.response_mask, "token-mean")
        return total / n

    def reinforce(logp: torch.Tensor) -> torch.Tensor:
        return -(adv * logp * rollouts.response_mask).sum() / rollouts.response_mask.sum()

    assert rewards.unique().numel() > 1
    for a, b in zip(grads(grpo), grads(reinforce), strict=True):
        assert torch.allclose(a, b, atol=1e-6, rtol=1e-5)
