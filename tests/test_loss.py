"""The chunked output-head loss equals `F.cross_entropy` on the full logits: value and every gradient."""

from __future__ import annotations

import math

import pytest
import torch
import torch.nn.functional as F

from tinylm.models.factory import build_model
from tinylm.models.loss import chunk_loss_and_grad, chunked_cross_entropy, default_chunk_rows
from tinylm.presets import preset_config


def _inputs(rows: int = 37, dim: int = 16, vocab: int = 101, bias: bool = True, seed: int = 0):
    g = torch.Generator().manual_seed(seed)
    hidden = torch.randn(rows, dim, generator=g).requires_grad_()
    weight = torch.randn(vocab, dim, generator=g).requires_grad_()
    b = torch.randn(vocab, generator=g).requires_grad_() if bias else None
    targets = torch.randint(0, vocab, (rows,), generator=g)
    targets[::5] = -1  # ignored positions
    return hidden, weight, b, targets


def _reference(hidden, weight, bias, targets):
    return F.cross_entropy(F.linear(hidden, weight, bias).float(), targets, ignore_index=-1)


def _grads(loss, tensors):
    return torch.autograd.grad(loss, [t for t in tensors if t is not None])


@pytest.mark.parametrize("chunk_rows", [1, 8, 37, 1000])
@pytest.mark.parametrize("bias", [True, False])
def test_value_and_gradients_match_full_logits(chunk_rows: int, bias: bool) -> None:
    hidden, weight, b, targets = _inputs(bias=bias)
    expected = _reference(hidden, weight, b, targets)
    got = chunked_cross_entropy(hidden, weight, targets, b, chunk_rows=chunk_rows)
    torch.testing.assert_close(got, expected, rtol=1e-6, atol=1e-6)
    for g_got, g_ref in zip(_grads(got, (hidden, weight, b)), _grads(expected, (hidden, weight, b))):
        torch.testing.assert_close(g_got, g_ref, rtol=1e-5, atol=1e-6)


def test_gradient_follows_the_incoming_gradient() -> None:
    """backward scales the stored gradients: 3 * loss + loss^2 differentiates like the reference."""
    hidden, weight, b, targets = _inputs()
    got = chunked_cross_entropy(hidden, weight, targets, b, chunk_rows=7)
    expected = _reference(hidden, weight, b, targets)
    for g_got, g_ref in zip(_grads(3 * got + got**2, (hidden, weight)), _grads(3 * expected + expected**2,
                                                                                (hidden, weight))):
        torch.testing.assert_close(g_got, g_ref, rtol=1e-5, atol=1e-6)


def test_batched_shapes_and_no_grad_path() -> None:
    hidden, weight, b, targets = _inputs(rows=24)
    with torch.no_grad():
        got = chunked_cross_entropy(hidden.view(2, 12, -1), weight, targets.view(2, 12), b, chunk_rows=5)
        torch.testing.assert_close(got, _reference(hidden, weight, b, targets), rtol=1e-6, atol=1e-6)


def test_all_targets_ignored_is_nan_like_torch() -> None:
    hidden, weight, b, targets = _inputs()
    targets[:] = -1
    assert math.isnan(_reference(hidden, weight, b, targets).item())
    assert math.isnan(chunked_cross_entropy(hidden, weight, targets, b).item())


def test_bf16_autocast_matches_autocast_reference() -> None:
    """Under autocast the head's matmuls run in bf16 both ways; results agree to bf16 precision."""
    hidden, weight, b, targets = _inputs(rows=64, dim=32, vocab=300)
    with torch.autocast("cpu", dtype=torch.bfloat16):
        expected = _reference(hidden, weight, b, targets)
        got = chunked_cross_entropy(hidden, weight, targets, b, chunk_rows=16)
    torch.testing.assert_close(got, expected, rtol=2e-3, atol=2e-3)
    for g_got, g_ref in zip(_grads(got, (hidden, weight, b)), _grads(expected, (hidden, weight, b))):
        assert g_got.dtype == g_ref.dtype
        torch.testing.assert_close(g_got, g_ref, rtol=2e-2, atol=2e-4)


@pytest.mark.parametrize("backend", ["aot_eager", "inductor"])
@pytest.mark.parametrize("autocast", [False, True])
@pytest.mark.parametrize("reduction", ["mean", "sum"])
def test_compiled_chunk_step_equals_the_eager_kernels(backend: str, autocast: bool, reduction: str) -> None:
    """--compile's fused softmax/gradient (uneven last chunk, ignored rows) gives the eager path's loss and grads."""
    import torch._dynamo

    from tinylm.runtime.compile_policy import have_compiler

    if backend == "inductor" and not have_compiler():
        pytest.skip("inductor needs a C++ compiler")
    torch._dynamo.reset()
    step = torch.compile(chunk_loss_and_grad, backend=backend)
    hidden, weight, b, targets = _inputs(rows=45, dim=16, vocab=120)
    results = []
    for chunk_step in (None, step):
        with torch.autocast("cpu", dtype=torch.bfloat16, enabled=autocast):
            loss = chunked_cross_entropy(hidden, weight, targets, b, chunk_rows=16, reduction=reduction,
                                         chunk_step=chunk_step)
        results.append((loss, *_grads(loss, (hidden, weight, b))))
    tol = dict(rtol=1e-2, atol=1e-4) if autocast else dict(rtol=1e-5, atol=1e-6)  # bf16: one rounding apart
    for got, eager in zip(results[1], results[0], strict=True):
        assert got.dtype == eager.dtype
        torch.testing.assert_close(got, eager, **tol)
    if not autocast:
        torch.testing.assert_close(results[1][0], _reference(hidden, weight, b, targets) * (
            (targets >= 0).sum() if reduction == "sum" else 1), rtol=1e-6, atol=1e-5)


def test_default_chunk_rows_shrinks_with_vocabulary() -> None:
    assert default_chunk_rows(50304) < default_chunk_rows(4096)
    assert default_chunk_rows(10**9) >= 1


@pytest.mark.parametrize("arch,overrides", [
    ("classic", {}),
    ("modern", {}),
    ("modern", {"n_experts": 4, "n_experts_per_token": 2}),  # the balance loss is added on top
])
def test_model_forward_without_logits_trains_identically(arch: str, overrides: dict) -> None:
    config = preset_config("tiny", arch, vocab_size=512, n_embed=32, n_head=2, n_blocks=1, context_length=32,
                           **({"n_kv_head": 1} if arch == "modern" else {}), **overrides)
    torch.manual_seed(0)
    model = build_model(config).train()
    idx = torch.randint(0, 512, (2, 32))
    targets = torch.randint(0, 512, (2, 32))
    results = []
    for return_logits in (True, False):
        model.zero_grad(set_to_none=True)
        logits, loss = model(idx, targets, return_logits=return_logits)
        loss.backward()
        results.append((logits, loss.detach(), {n: p.grad.clone() for n, p in model.named_parameters()}))
    (logits, loss_full, grads_full), (no_logits, loss_chunked, grads_chunked) = results
    assert logits.shape == (2, 32, 512) and no_logits is None
    torch.testing.assert_close(loss_chunked, loss_full, rtol=1e-6, atol=1e-6)
    assert grads_full.keys() == grads_chunked.keys()
    for name in grads_full:
        torch.testing.assert_close(grads_chunked[name], grads_full[name], rtol=1e-4, atol=1e-6, msg=name)


@pytest.mark.parametrize("chunk_rows", [5, 1000])
def test_sum_reduction_is_mean_times_count_with_matching_gradients(chunk_rows: int) -> None:
    hidden, weight, b, targets = _inputs()
    count = int((targets != -1).sum())
    expected = F.cross_entropy(F.linear(hidden, weight, b).float(), targets, ignore_index=-1, reduction="sum")
    got = chunked_cross_entropy(hidden, weight, targets, b, chunk_rows=chunk_rows, reduction="sum")
    mean = chunked_cross_entropy(hidden, weight, targets, b, chunk_rows=chunk_rows)
    torch.testing.assert_close(got, expected, rtol=1e-6, atol=1e-5)
    torch.testing.assert_close(got, mean * count, rtol=1e-6, atol=1e-5)
    for g_got, g_ref in zip(_grads(got, (hidden, weight, b)), _grads(expected, (hidden, weight, b))):
        torch.testing.assert_close(g_got, g_ref, rtol=1e-5, atol=1e-5)


def test_unknown_reduction_is_refused() -> None:
    hidden, weight, b, targets = _inputs()
    with pytest.raises(ValueError, match="reduction='max'"):
        chunked_cross_entropy(hidden, weight, targets, b, reduction="max")


@pytest.mark.parametrize("arch,overrides", [
    ("classic", {}),
    ("modern", {"n_experts": 4, "n_experts_per_token": 2}),  # sum / count still includes the balance loss once
])
@pytest.mark.parametrize("return_logits", [True, False])
def test_model_sum_reduction_accumulates_exactly(arch: str, overrides: dict, return_logits: bool) -> None:
    """Two micro-batches with different target counts: summed losses / total count == one batch's mean."""
    config = preset_config("tiny", arch, vocab_size=256, n_embed=32, n_head=2, n_blocks=1, context_length=16,
                           **overrides)
    torch.manual_seed(0)
    model = build_model(config).train()
    idx = torch.randint(0, 256, (4, 16))
    targets = torch.randint(0, 256, (4, 16))
    targets[:2, :11] = -100  # PyTorch's ignore convention is honoured as well as -1
    targets[2:, :3] = -1
    count = int((targets >= 0).sum())

    model.zero_grad(set_to_none=True)
    total = sum(model(idx[rows], targets[rows], return_logits, reduction="sum")[1] for rows in (slice(0, 2),
                                                                                                 slice(2, 4)))
    (total / count).backward()
    accumulated = {n: p.grad.clone() for n, p in model.named_parameters()}
    model.zero_grad(set_to_none=True)
    _, mean = model(idx, targets, return_logits)
    mean.backward()
    if not overrides:  # the MoE balance loss is per micro-batch, so only the dense model matches one batch
        torch.testing.assert_close(total / count, mean.detach(), rtol=1e-6, atol=1e-6)
        for name, p in model.named_parameters():
            torch.testing.assert_close(accumulated[name], p.grad, rtol=1e-4, atol=1e-6, msg=name)
    _, whole = model(idx, targets, return_logits, reduction="sum")
    _, whole_mean = model(idx, targets, return_logits)
    torch.testing.assert_close(whole / count, whole_mean, rtol=1e-6, atol=1e-6)


def _reference_with_z(hidden, weight, bias, targets, z, reduction="mean"):
    """PaLM's z-loss written from its formula: CE + z * logsumexp(logits)^2, over the counted rows."""
    logits = F.linear(hidden, weight, bias).float()
    counted = targets >= 0
    per_row = F.cross_entropy(logits, targets, ignore_index=-1, reduction="none") \
        + z * torch.logsumexp(logits, dim=-1) ** 2
    total = (per_row * counted).sum()
    return total / counted.sum() if reduction == "mean" else total


@pytest.mark.parametrize("reduction", ["mean", "sum"])
@pytest.mark.parametrize("chunk_rows", [1, 8, 1000])
def test_z_loss_value_and_gradients_match_its_formula(chunk_rows: int, reduction: str) -> None:
    hidden, weight, b, targets = _inputs()
    with torch.no_grad():  # logits far from zero, so the z term is large and its gradient matters
        weight.mul_(3)
    expected = _reference_with_z(hidden, weight, b, targets, 0.01, reduction)
    got = chunked_cross_entropy(hidden, weight, targets, b, chunk_rows=chunk_rows, reduction=reduction, z_loss=0.01)
    plain = chunked_cross_entropy(hidden, weight, targets, b, chunk_rows=chunk_rows, reduction=reduction)
    assert got.item() > plain.item() + 0.05  # the term is there, not a rounding
    torch.testing.assert_close(got, expected, rtol=1e-6, atol=1e-5)
    for g_got, g_ref in zip(_grads(got, (hidden, weight, b)), _grads(expected, (hidden, weight, b)), strict=True):
        torch.testing.assert_close(g_got, g_ref, rtol=1e-5, atol=1e-5)


def test_z_loss_through_the_model_with_and_without_logits_and_compiled_chunks() -> None:
    """The model's two loss paths (plain logits, chunked) and the fused chunk agree on loss and gradients."""
    import torch._dynamo

    torch._dynamo.reset()
    model = build_model(preset_config("tiny", n_blocks=1, vocab_size=97, context_length=16))
    idx = torch.randint(0, 97, (2, 16), generator=torch.Generator().manual_seed(0))
    targets = idx.roll(-1, dims=1)
    targets[:, -1] = -1
    results = []
    for how in ("logits", "chunked", "compiled"):
        model.zero_grad()
        step = torch.compile(chunk_loss_and_grad, backend="eager") if how == "compiled" else None
        if step is not None:
            from tinylm.models.loss import _COMPILED_HEADS

            _COMPILED_HEADS[model.lm_head] = step
        _, loss = model(idx, targets, return_logits=how == "logits", z_loss=1e-2)
        loss.backward()
        results.append((loss.detach(), model.token_embed.weight.grad.clone()))
    _, plain = model(idx, targets, return_logits=False)
    assert results[0][0].item() > plain.item()
    for loss, grad in results[1:]:
        torch.testing.assert_close(loss, results[0][0], rtol=1e-6, atol=1e-6)
        torch.testing.assert_close(grad, results[0][1], rtol=1e-5, atol=1e-7)


def _reference_capped(hidden, weight, bias, targets, cap, reduction="mean"):
    """Soft-capping written from its formula, cap * tanh(logits / cap), then plain cross-entropy (autograd)."""
    logits = F.linear(hidden, weight, bias).float()
    return F.cross_entropy(cap * torch.tanh(logits / cap), targets, ignore_index=-1, reduction=reduction)


@pytest.mark.parametrize("reduction", ["mean", "sum"])
@pytest.mark.parametrize("chunk_rows", [1, 8, 1000])
def test_softcap_value_and_gradients_match_its_formula(chunk_rows: int, reduction: str) -> None:
    hidden, weight, b, targets = _inputs()
    with torch.no_grad():  # logits of tens: the cap of 5 bends them hard, so a missing tanh factor would show
        weight.mul_(4)
    expected = _reference_capped(hidden, weight, b, targets, 5.0, reduction)
    got = chunked_cross_entropy(hidden, weight, targets, b, chunk_rows=chunk_rows, reduction=reduction, softcap=5.0)
    plain = chunked_cross_entropy(hidden, weight, targets, b, chunk_rows=chunk_rows, reduction=reduction)
    assert abs(got.item() - plain.item()) > 1.0
    torch.testing.assert_close(got, expected, rtol=1e-6, atol=1e-5)
    for g_got, g_ref in zip(_grads(got, (hidden, weight, b)), _grads(expected, (hidden, weight, b)), strict=True):
        torch.testing.assert_close(g_got, g_ref, rtol=1e-5, atol=1e-5)
    both = chunked_cross_entropy(hidden, weight, targets, b, chunk_rows=chunk_rows, reduction=reduction, softcap=5.0,
                                 z_loss=0.01)
    capped = 5.0 * torch.tanh(F.linear(hidden, weight, b) / 5.0)
    expected_both = expected + 0.01 * (torch.logsumexp(capped, -1) ** 2 * (targets >= 0)).sum() / (
        (targets >= 0).sum() if reduction == "mean" else 1)
    torch.testing.assert_close(both, expected_both, rtol=1e-6, atol=1e-5)


def test_softcap_model_paths_agree_and_bound_the_logits() -> None:
    """A capped model: forward's logits are the capped head, inside (-cap, cap); its chunked, plain and fused
    losses and gradients agree; `model.logits` (what decoding samples from) equals forward's logits."""
    import torch._dynamo

    from tinylm.models.loss import _COMPILED_HEADS

    torch._dynamo.reset()
    torch.manual_seed(0)
    model = build_model(preset_config("tiny", n_blocks=1, vocab_size=97, context_length=16, init_std=0.5,
                                      logit_softcap=3.0))
    idx = torch.randint(0, 97, (2, 16), generator=torch.Generator().manual_seed(0))
    targets = idx.roll(-1, dims=1)
    logits, _ = model(idx)
    raw = model.lm_head(model.forward_hidden(idx))
    assert raw.abs().max() > 3.0 and logits.abs().max() < 3.0
    torch.testing.assert_close(logits, 3.0 * torch.tanh(raw / 3.0))
    results = []
    for how in ("logits", "chunked", "compiled"):
        model.zero_grad()
        if how == "compiled":
            _COMPILED_HEADS[model.lm_head] = torch.compile(chunk_loss_and_grad, backend="eager")
        _, loss = model(idx, targets, return_logits=how == "logits")
        loss.backward()
        results.append((loss.detach(), model.token_embed.weight.grad.clone()))
    for loss, grad in results[1:]:
        torch.testing.assert_close(loss, results[0][0], rtol=1e-6, atol=1e-6)
        # float32 sums in another order: on an AVX2-only CPU a few of 12,416 entries differ by ~2e-6 (1e-6 held on
        # AVX-512 ones), as the plain-vs-chunked gradients above are compared at 1e-5
        torch.testing.assert_close(grad, results[0][1], rtol=1e-5, atol=1e-5)
    torch.testing.assert_close(model.logits(model.forward_hidden(idx)), logits)
