"""Gradient accumulation equals one big batch; clipping reports the pre-clip norm."""

from __future__ import annotations

import pytest
import torch

from tinylm.models.factory import build_model
from tinylm.presets import preset_config
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


@pytest.mark.parametrize("arch", ["modern", "classic"])
def test_four_micro_batches_equal_one_big_batch(arch: str) -> None:
    model = micro(arch)
    data = torch.randint(0, 64, (8, 17), generator=torch.Generator().manual_seed(1))
    x, y = data[:, :-1], data[:, 1:]

    chunks = iter([(x[i:i + 2], y[i:i + 2]) for i in range(0, 8, 2)])
    loss_acc = accumulate_gradients(model, lambda: next(chunks), 4, CPU, torch.float32)
    acc = grads(model)
    model.zero_grad(set_to_none=True)

    whole = iter([(x, y)])
    loss_big = accumulate_gradients(model, lambda: next(whole), 1, CPU, torch.float32)
    big = grads(model)

    assert loss_acc.item() == pytest.approx(loss_big.item(), abs=1e-6)
    for name in big:
        assert torch.allclose(acc[name], big[name], atol=1e-7, rtol=1e-5), name
    # without the 1/n scaling the gradient would be 4x too large: the check above can tell
    assert not torch.allclose(4 * acc["token_embed.weight"], big["token_embed.weight"], rtol=1e-2)


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
