"""Blockwise causal attention against SDPA and a float64 reference, and the policy that chooses it."""

from __future__ import annotations

import math
from pathlib import Path

import pytest
import torch
import torch.nn.functional as F

from tinylm.config import ModelConfig
from tinylm.errors import TinyLMError
from tinylm.models.factory import build_model
from tinylm.models.modern.blockwise_attention import blockwise_causal_attention, query_blocks
from tinylm.models.modern.mask import attention_mask
from tinylm.runtime import attention_policy, measure_cache
from tinylm.runtime.attention_policy import AttentionTiming, choose_attention, use_attention_kernel

CPU = torch.device("cpu")
MICRO = ModelConfig(arch="modern", vocab_size=256, context_length=128, n_embed=32, n_head=4, n_kv_head=2,
                    n_blocks=2, tie_embeddings=True)


def reference(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, allowed: torch.Tensor | None) -> torch.Tensor:
    """softmax(q k^T / sqrt(D) + mask) v in float64, grouped heads expanded by hand."""
    q, k, v = q.double(), k.double(), v.double()
    group = q.shape[1] // k.shape[1]
    k, v = k.repeat_interleave(group, dim=1), v.repeat_interleave(group, dim=1)
    T = q.shape[2]
    if allowed is None:
        allowed = torch.ones(T, T, dtype=torch.bool).tril()
    scores = (q @ k.transpose(-1, -2)) / math.sqrt(q.shape[-1])
    return torch.softmax(scores.masked_fill(~allowed, float("-inf")), dim=-1) @ v


def qkv(B: int, H: int, K: int, T: int, D: int, dtype: torch.dtype = torch.float32, seed: int = 0):
    g = torch.Generator().manual_seed(seed)
    make = lambda heads: (torch.randn(B, heads, T, D, generator=g) * 2).to(dtype).requires_grad_()  # noqa: E731
    return make(H), make(K), make(K)


@pytest.mark.parametrize("length", [1, 7, 63, 64, 100, 128, 257])
def test_query_blocks_partition_the_rows(length: int) -> None:
    blocks = query_blocks(length)
    assert blocks[0][0] == 0 and blocks[-1][1] == length
    assert all(hi == lo for (_, hi), (lo, _) in zip(blocks, blocks[1:]))  # contiguous, no gap, no overlap
    assert 1 <= len(blocks) <= 4 and all(hi > lo for lo, hi in blocks)
    assert len(blocks) == 1 or min(hi - lo for lo, hi in blocks) >= 32


@pytest.mark.parametrize(("heads", "kv_heads"), [(4, 4), (4, 2), (6, 1)])
@pytest.mark.parametrize("length", [1, 5, 64, 130])
def test_blockwise_equals_sdpa_and_the_float64_reference(heads: int, kv_heads: int, length: int) -> None:
    q, k, v = qkv(2, heads, kv_heads, length, 16)
    ours = blockwise_causal_attention(q, k, v)
    group = heads // kv_heads
    sdpa = F.scaled_dot_product_attention(q, k.repeat_interleave(group, 1), v.repeat_interleave(group, 1),
                                          is_causal=True)
    torch.testing.assert_close(ours, sdpa, rtol=1e-5, atol=1e-5)
    torch.testing.assert_close(ours.double(), reference(q, k, v, None), rtol=1e-5, atol=1e-5)
    grad = torch.randn_like(ours)
    mine = torch.autograd.grad(ours, (q, k, v), grad)
    theirs = torch.autograd.grad(sdpa, (q, k, v), grad)
    for a, b in zip(mine, theirs, strict=True):
        torch.testing.assert_close(a, b, rtol=1e-4, atol=1e-5)


def test_blockwise_follows_packed_padded_and_windowed_masks() -> None:
    """Every mask `attention_mask` builds without a cache (segments, padding, a window) is obeyed."""
    T = 96
    segments = torch.tensor([[0] * 40 + [1] * 56, [0] * 70 + [1] * 26])
    key_valid = torch.ones(2, T, dtype=torch.bool)
    key_valid[1, :9] = False  # left padding
    for window, segs, valid in [(None, segments, None), (None, None, key_valid), (24, None, None),
                                (24, segments, key_valid)]:
        allowed, is_causal = attention_mask(T, 0, window, valid, CPU, segs)
        assert allowed is not None and not is_causal
        q, k, v = qkv(2, 4, 2, T, 8, seed=1)
        ours = blockwise_causal_attention(q, k, v, allowed)
        torch.testing.assert_close(ours.double(), reference(q, k, v, allowed), rtol=1e-5, atol=1e-5)


def test_a_bf16_softmax_is_a_float32_softmax_rounded_to_bf16() -> None:
    """Why the scores may stay bf16: the CPU kernel computes in float32 and rounds only its output."""
    scores = (torch.randn(64, 300, generator=torch.Generator().manual_seed(2)) * 6).bfloat16()
    scores[:, 200:] = float("-inf")
    assert torch.equal(torch.softmax(scores, -1), torch.softmax(scores.float(), -1).bfloat16())


@pytest.mark.parametrize("head_dim", [32, 64])
def test_bf16_blockwise_is_as_accurate_as_transformers_eager_attention(head_dim: int) -> None:
    """In bf16 the scores are rounded to bf16 before the softmax, as `transformers`' eager attention does.

    So the reference is that function itself, run on the same inputs: against float64, our error is
    that of `eager_attention_forward` (within rounding noise). SDPA keeps its scores in float32 and
    is more accurate; that gap is printed by the bench as the price of the speed (docs/pipeline/precision.md).
    """
    from types import SimpleNamespace

    from transformers.models.llama.modeling_llama import eager_attention_forward

    q, k, v = qkv(2, 4, 2, 200, head_dim, torch.bfloat16, seed=3)
    exact = reference(q, k, v, None)
    ours = (blockwise_causal_attention(q, k, v).double() - exact).abs()
    causal = torch.full((200, 200), float("-inf"), dtype=torch.bfloat16).triu(1)
    module = SimpleNamespace(num_key_value_groups=2, training=False)
    theirs, _ = eager_attention_forward(module, q, k, v, causal, scaling=head_dim**-0.5)
    theirs = (theirs.transpose(1, 2).double() - exact).abs()
    assert ours.max() <= 1.5 * theirs.max(), (ours.max(), theirs.max())
    assert ours.mean() <= 1.2 * theirs.mean(), (ours.mean(), theirs.mean())


def loss_and_grads(model: torch.nn.Module, x: torch.Tensor, segments: torch.Tensor | None = None):
    positions = None if segments is None else torch.cat([torch.arange(50), torch.arange(78)])[None].expand(2, -1)
    _, loss = model(x, x, return_logits=False, segments=segments, positions=positions)
    loss.backward()
    return loss.detach(), {n: p.grad.clone() for n, p in model.named_parameters()}


@pytest.mark.parametrize("packed", [False, True])
@pytest.mark.parametrize("checkpointing", [False, True])
def test_a_model_on_the_blockwise_kernel_trains_like_one_on_sdpa(packed: bool, checkpointing: bool) -> None:
    config = MICRO.replace(gradient_checkpointing=checkpointing)
    torch.manual_seed(0)
    sdpa, blockwise = build_model(config), build_model(config)
    blockwise.load_state_dict(sdpa.state_dict())
    use_attention_kernel(blockwise, "blockwise")
    assert {m.kernel for m in blockwise.modules() if hasattr(m, "kernel")} == {"blockwise"}
    x = torch.randint(0, config.vocab_size, (2, 128), generator=torch.Generator().manual_seed(1))
    segments = torch.tensor([[0] * 50 + [1] * 78] * 2) if packed else None
    loss, grads = loss_and_grads(sdpa, x, segments)
    other_loss, other_grads = loss_and_grads(blockwise, x, segments)
    torch.testing.assert_close(other_loss, loss, rtol=1e-6, atol=1e-6)
    for name, grad in grads.items():
        torch.testing.assert_close(other_grads[name], grad, rtol=1e-4, atol=1e-6, msg=name)


def test_the_kv_cache_path_ignores_the_training_kernel() -> None:
    """Generation appends to a cache (queries after slot 0): it stays on SDPA, with the same logits."""
    torch.manual_seed(0)
    model = build_model(MICRO).eval()
    ids = torch.randint(0, MICRO.vocab_size, (1, 40), generator=torch.Generator().manual_seed(4))
    with torch.no_grad():
        full = model(ids)[0]
        use_attention_kernel(model, "blockwise")
        cache = model.new_cache(1)
        model.forward_hidden(ids[:, :30], cache)
        last = model.logits(model.forward_hidden(ids[:, 30:], cache))
        torch.testing.assert_close(model(ids)[0], full, rtol=1e-5, atol=1e-5)
    torch.testing.assert_close(last, full[:, 30:], rtol=1e-4, atol=1e-5)


def test_compiled_blocks_on_the_blockwise_kernel_trace_to_the_eager_result(one_thread: None) -> None:
    import torch._dynamo

    from tinylm.runtime.compile_policy import compile_blocks

    torch._dynamo.reset()
    torch.manual_seed(0)
    eager, compiled = build_model(MICRO), build_model(MICRO)
    compiled.load_state_dict(eager.state_dict())
    use_attention_kernel(eager, "blockwise")
    use_attention_kernel(compiled, "blockwise")
    compile_blocks(compiled, backend="aot_eager")
    x = torch.randint(0, MICRO.vocab_size, (2, 128), generator=torch.Generator().manual_seed(1))
    loss, grads = loss_and_grads(eager, x)
    compiled_loss, compiled_grads = loss_and_grads(compiled, x)
    torch.testing.assert_close(compiled_loss, loss)
    for name, grad in grads.items():
        torch.testing.assert_close(compiled_grads[name], grad, rtol=1e-5, atol=1e-6, msg=name)


# ---- the policy -------------------------------------------------------------------------------------

class FakeTiming:
    """Stands in for the timed measurement: a chosen ratio (and spread), and a count of the calls."""

    def __init__(self, ratio: float, spread: float = 0.0) -> None:
        self.ratio, self.spread, self.calls = ratio, spread, 0

    def __call__(self, config, rows, seq_len, dtype, device, repeats=5) -> AttentionTiming:
        self.calls += 1
        return AttentionTiming(sdpa_s=0.01 * self.ratio, blockwise_s=0.01, wall_s=0.3, spread=self.spread)


@pytest.fixture(autouse=True)
def quiet_machine(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(measure_cache, "machine_busy", lambda: False)


def test_explicit_kernels_win_and_unknown_ones_are_refused(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(attention_policy, "time_kernels", lambda *a, **k: pytest.fail("an explicit choice measured"))
    for kernel in ("sdpa", "blockwise"):
        choice = choose_attention(kernel, MICRO, 4, 128, torch.float32, CPU)
        assert choice.value == kernel and f"--attention {kernel}" in choice.reason
    with pytest.raises(TinyLMError, match="unknown --attention"):
        choose_attention("flash", MICRO, 4, 128, torch.float32, CPU)


def test_models_without_the_kernel_gpus_and_short_rows_keep_sdpa(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(attention_policy, "time_kernels", lambda *a, **k: pytest.fail("measured"))
    classic = ModelConfig(arch="classic", vocab_size=256, context_length=128, n_embed=32, n_head=2, n_blocks=1)
    mla = MICRO.replace(attention="mla")
    for config in (classic, mla):
        assert choose_attention("auto", config, 4, 128, torch.float32, CPU).value == "sdpa"
        with pytest.raises(TinyLMError, match="needs the modern arch with standard attention"):
            choose_attention("blockwise", config, 4, 128, torch.float32, CPU)
    gpu = choose_attention("auto", MICRO, 4, 128, torch.bfloat16, torch.device("cuda"))
    assert gpu.value == "sdpa" and "cuda" in gpu.reason
    short = choose_attention("auto", MICRO, 4, 32, torch.float32, CPU)
    assert short.value == "sdpa" and "single query block" in short.reason


def test_auto_follows_the_measurement_and_caches_it(monkeypatch: pytest.MonkeyPatch) -> None:
    fast = FakeTiming(1.8)
    monkeypatch.setattr(attention_policy, "time_kernels", fast)
    first = choose_attention("auto", MICRO, 4, 128, torch.bfloat16, CPU)
    assert first.value == "blockwise" and "1.80x faster" in first.reason and "measured now in 0.3 s" in first.reason
    again = choose_attention("auto", MICRO, 4, 128, torch.bfloat16, CPU)
    assert again.value == "blockwise" and again.reason.endswith("(cached)") and fast.calls == 1
    slow = FakeTiming(1.02)  # another dtype is another measurement; a tie keeps SDPA
    monkeypatch.setattr(attention_policy, "time_kernels", slow)
    tie = choose_attention("auto", MICRO, 4, 128, torch.float32, CPU)
    assert tie.value == "sdpa" and "1.02x of SDPA" in tie.reason and slow.calls == 1


def test_a_measurement_on_a_busy_machine_is_kept_too(monkeypatch: pytest.MonkeyPatch) -> None:
    fake = FakeTiming(2.0)
    monkeypatch.setattr(attention_policy, "time_kernels", fake)
    monkeypatch.setattr(measure_cache, "machine_busy", lambda: True)
    choice = choose_attention("auto", MICRO, 4, 128, torch.float32, CPU)
    assert choice.value == "blockwise" and choice.reason.endswith("machine busy)")
    monkeypatch.setattr(attention_policy, "time_kernels", FakeTiming(0.9))  # what a second busy run might measure
    again = choose_attention("auto", MICRO, 4, 128, torch.float32, CPU)
    assert again.value == "blockwise" and again.reason.endswith("(cached)") and fake.calls == 1


def test_a_close_call_keeps_sdpa_and_is_kept(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(attention_policy, "time_kernels", FakeTiming(1.08, spread=0.04))
    choice = choose_attention("auto", MICRO, 4, 128, torch.bfloat16, CPU)
    assert choice.value == "sdpa" and choice.reason == (
        "sdpa: the blockwise kernel measured 1.08x of SDPA, within the noise (±0.04) of the 1.05x that pays "
        "(measured now in 0.3 s)")
    monkeypatch.setattr(attention_policy, "time_kernels", lambda *a, **k: pytest.fail("a kept decision measured"))
    again = choose_attention("auto", MICRO, 4, 128, torch.bfloat16, CPU)
    assert again.value == "sdpa" and again.reason.endswith("that pays (cached)") and again.cached


def test_the_measurement_times_both_kernels_and_leaves_the_rng_alone(one_thread: None) -> None:
    torch.manual_seed(5)
    expected = torch.rand(3)
    torch.manual_seed(5)
    timing = attention_policy.time_kernels(MICRO, rows=2, seq_len=128, dtype=torch.float32, device=CPU, repeats=2)
    assert torch.equal(torch.rand(3), expected)
    assert timing.sdpa_s > 0 and timing.blockwise_s > 0 and timing.ratio == timing.sdpa_s / timing.blockwise_s
    assert timing.wall_s >= timing.sdpa_s + timing.blockwise_s


def test_a_training_run_reports_and_keeps_its_kernel_across_a_resume(tmp_path: Path,
                                                                     monkeypatch: pytest.MonkeyPatch) -> None:
    from test_train_support import MICRO as TRAIN_MICRO
    from test_train_support import config, losses
    from tinylm.checkpoint import list_checkpoints, load_train_state
    from tinylm.stages.pretrain import pretrain

    lines: list[str] = []
    kw = dict(overrides={**TRAIN_MICRO, "dropout": 0.1, "context_length": 64}, seq_len=64, schedule_steps=4)
    pretrain(config(tmp_path / "straight", max_steps=4, attention="blockwise", **kw))
    pretrain(config(tmp_path / "resumed", max_steps=2, attention="blockwise", **kw))
    assert load_train_state(list_checkpoints(tmp_path / "resumed")[-1])["attention"] == "blockwise"
    monkeypatch.setattr(attention_policy, "time_kernels", lambda *a, **k: pytest.fail("a resumed run measured"))
    from tinylm.train import loop

    monkeypatch.setattr(loop._Run, "say", lambda self, line: lines.append(line))
    pretrain(config(tmp_path / "resumed", max_steps=4, attention="auto", resume="latest", **kw))
    assert losses(tmp_path / "resumed") == losses(tmp_path / "straight")  # bit for bit, dropout and all
    # a resume takes the run's own options (train/resume_options.py), the kernel among them: nothing is measured
    assert any(line.startswith("attention: blockwise:") for line in lines), lines
