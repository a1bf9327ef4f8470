"""Gradient accumulation equals one big batch; clipping reports the pre-clip norm."""

from __future__ import annotations

import pytest
import torch

from tinylm.models.factory import build_model
from tinylm.presets import preset_config
from tinylm.train.stage import StageLoss
from tinylm.train.step import accumulate_gradients, clip_gradients

CPU = torch.device("cpu")


pytestmark = pytest.mark.usefixtures("one_thread")


def micro(arch: str) -> torch.nn.Module:
    torch.manual_seed(0)
    kw: dict[str, object] = dict(vocab_size=64, context_length=16, n_embed=32, n_head=2, n_blocks=2)
    if arch == "modern":
        kw["n_kv_head"] = 1
    return build_model(preset_config("tiny", arch, **kw))


def grads(model: torch.nn.Module) -> dict[str, torch.Tensor]:
    return {n: p.grad.clone() for n, p in model.named_parameters()}


def token_sum_loss(model: torch.nn.Module, batch: tuple[torch.Tensor, torch.Tensor]) -> StageLoss:
    """What a stage returns: the loss summed over the batch's target tokens (-1 = not a target)."""
    x, y = batch
    _, mean = model(x, y, return_logits=False)
    count = (y != -1).sum()
    return StageLoss(mean * count, {"targets": count.float()})


def accumulate(model: torch.nn.Module, batches: list[tuple[torch.Tensor, torch.Tensor]]) -> torch.Tensor:
    weight = float(sum(int((y != -1).sum()) for _, y in batches))
    total, metrics = accumulate_gradients(model, batches, token_sum_loss, weight, 1, CPU, torch.float32)
    assert metrics["targets"].item() == weight
    return total / weight


@pytest.mark.parametrize("arch", ["modern", "classic"])
def test_four_micro_batches_equal_one_big_batch(arch: str) -> None:
    model = micro(arch)
    data = torch.randint(0, 64, (8, 17), generator=torch.Generator().manual_seed(1))
    x, y = data[:, :-1], data[:, 1:]

    loss_acc = accumulate(model, [(x[i:i + 2], y[i:i + 2]) for i in range(0, 8, 2)])
    acc = grads(model)
    model.zero_grad(set_to_none=True)

    loss_big = accumulate(model, [(x, y)])
    big = grads(model)

    assert loss_acc.item() == pytest.approx(loss_big.item(), abs=1e-6)
    for name in big:
        assert torch.allclose(acc[name], big[name], atol=1e-7, rtol=1e-5), name
    # without the 1/n scaling the gradient would be 4x too large: the check above can tell
    assert not torch.allclose(4 * acc["token_embed.weight"], big["token_embed.weight"], rtol=1e-2)


@pytest.mark.parametrize("arch", ["modern", "classic"])
def test_uneven_targets_accumulate_to_the_token_mean_of_one_big_batch(arch: str) -> None:
    """SFT micro-batches hold different numbers of target tokens: dividing each micro-batch's sum by the
    step's total count (not averaging micro-batch means) is what equals one big batch."""
    model = micro(arch)
    data = torch.randint(0, 64, (6, 17), generator=torch.Generator().manual_seed(2))
    x, y = data[:, :-1], data[:, 1:].clone()
    keep = torch.rand(y.shape, generator=torch.Generator().manual_seed(3)) < torch.linspace(0.1, 0.9, 6)[:, None]
    keep[:, 0] = True  # every row learns something
    y[~keep] = -1
    loss_acc = accumulate(model, [(x[:1], y[:1]), (x[1:4], y[1:4]), (x[4:], y[4:])])
    acc = grads(model)
    model.zero_grad(set_to_none=True)
    loss_big = accumulate(model, [(x, y)])
    big = grads(model)
    assert loss_acc.item() == pytest.approx(loss_big.item(), abs=1e-6)
    for name in big:
        assert torch.allclose(acc[name], big[name], atol=1e-7, rtol=1e-5), name
    # the mean of micro-batch means is a different number here: the check above can tell
    means = [model(a, b, return_logits=False)[1].item() for a, b in [(x[:1], y[:1]), (x[1:4], y[1:4]), (x[4:], y[4:])]]
    assert abs(sum(means) / 3 - loss_big.item()) > 1e-4


def test_clip_returns_pre_clip_norm_and_rescales() -> None:
    p = torch.nn.Parameter(torch.zeros(4))
    q = torch.nn.Parameter(torch.zeros(3))
    p.grad = torch.tensor([3.0, 0.0, 0.0, 0.0])
    q.grad = torch.tensor([0.0, 4.0, 0.0])
    norm = clip_gradients([p, q], max_norm=1.0)
    assert norm.item() == pytest.approx(5.0)
    total = torch.cat([p.grad, q.grad]).norm()
    assert total.item() == pytest.approx(1.0, rel=1e-5)
    p.grad = torch.tensor([3.0, 0.0, 0.0, 0.0])
    q.grad = torch.tensor([0.0, 4.0, 0.0])
    assert clip_gradients([p, q], max_norm=0).item() == pytest.approx(5.0)  # 0 = measure only
    assert torch.equal(p.grad, torch.tensor([3.0, 0.0, 0.0, 0.0]))
