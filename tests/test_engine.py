"""The generation engine: cached == uncached for every variant, batching == one by one, past the window.

Models here use a large init_std so that random weights give varied, confident predictions (a
default-initialized random model predicts nearly uniform logits and repeats one token, which would
make "the same tokens" a weak check).
"""

from __future__ import annotations

import pytest
import torch

from model_variants import all_configs
from tinylm.inference.engine import Engine
from tinylm.inference.fast_decode import FastDecoder, one_query_attention, rotation_table
from tinylm.inference.packed_bf16 import can_pack, one_row_product, packed_linear
from tinylm.inference.runners import FastDecoder as RunnerFast
from tinylm.inference.runners import ModelCacheRunner, RecomputeRunner, make_runner
from tinylm.inference.sampling import GREEDY, SamplingParams
from tinylm.models.factory import build_model

CONFIGS = all_configs()
PROMPTS = [[3, 1, 4, 1, 5], [9, 2], [6, 5, 3, 5, 8, 9, 7, 9]]


def _model(name: str, **overrides) -> torch.nn.Module:
    torch.manual_seed(0)
    return build_model(CONFIGS[name].replace(init_std=0.4, **overrides)).eval()


def test_make_runner_picks_the_fastest_supported_path() -> None:
    assert isinstance(make_runner(_model("gqa"), 1), RunnerFast)
    assert isinstance(make_runner(_model("mla"), 1), ModelCacheRunner)
    assert isinstance(make_runner(_model("classic"), 1), RecomputeRunner)
    assert isinstance(make_runner(_model("gqa"), 1, use_cache=False), RecomputeRunner)


# The full variant list, and the refusals, are tests/test_fast_decode.py's; this hand-picked subset stays
# while docs/pipeline/generation.md names it.
@pytest.mark.parametrize("batch", [1, 2])  # one row: the single-row norm and the rotation-matrix RoPE
@pytest.mark.parametrize("name", ["mha", "gqa", "mqa", "qknorm", "window", "gated", "moe_shared", "untied"])
def test_fast_decoder_logits_match_the_model(name: str, batch: int) -> None:
    """The lean decode path computes the model's own logits: prefill, then token by token."""
    model = _model(name)
    idx = torch.randint(0, model.config.vocab_size, (batch, 20), generator=torch.Generator().manual_seed(1))
    with torch.inference_mode():
        reference, _ = model(idx)
        decoder = FastDecoder(model, batch_size=batch)
        logits = [decoder.extend(idx[:, :12], last_only=False)]
        logits += [decoder.extend(idx[:, t : t + 1]) for t in range(12, 20)]
    torch.testing.assert_close(torch.cat(logits, dim=1), reference, atol=1e-4, rtol=1e-4)


PACKING = pytest.mark.skipif(not can_pack(torch.zeros(1, dtype=torch.bfloat16)),
                             reason="no oneDNN bf16 packing here (a torch without its linear ops, or a CPU without "
                                    "its bf16 instructions)")


@PACKING
@pytest.mark.parametrize("rows", [(1,), (5,), (2, 3)])
def test_a_packed_bf16_weight_gives_f_linears_product_bit_for_bit(rows: tuple[int, ...]) -> None:
    g = torch.Generator().manual_seed(0)
    weight = torch.randn(96, 40, generator=g).bfloat16()
    x = torch.randn(*rows, 40, generator=g).bfloat16()
    assert torch.equal(packed_linear(weight)(x), torch.nn.functional.linear(x, weight))


@PACKING
@pytest.mark.parametrize("kernel", ["pytorch", "onednn"])
def test_either_one_row_kernel_gives_f_linears_product(kernel: str) -> None:
    g = torch.Generator().manual_seed(5)
    weight, x = torch.randn(96, 40, generator=g).bfloat16(), torch.randn(1, 40, generator=g).bfloat16()
    assert torch.equal(packed_linear(weight, kernel=kernel)(x), torch.nn.functional.linear(x, weight))


@PACKING
def test_the_one_row_kernel_is_measured_once_then_read_from_the_cache(tmp_path, monkeypatch) -> None:
    from tinylm.inference.row_kernel import MARGIN, bf16_row_kernel

    monkeypatch.setenv("TINYLM_HOME", str(tmp_path))
    first = bf16_row_kernel.__wrapped__()
    assert first.value in ("pytorch", "onednn") and "measured now" in first.reason and not first.cached
    ratio, spread = first.measured["ratio"], first.measured["spread"]
    assert (first.value == "pytorch") == (ratio - spread > MARGIN)  # PyTorch's only when clearly faster
    again = bf16_row_kernel.__wrapped__()
    assert again.cached and again.value == first.value and again.reason.endswith("(cached)")


@pytest.mark.parametrize("in_features", [40, 384, 1024])
def test_one_bf16_row_by_pytorchs_own_kernel_is_f_linears_product_and_leaves_onednn_on(in_features: int) -> None:
    g = torch.Generator().manual_seed(in_features)
    weight = torch.randn(96, in_features, generator=g).bfloat16()
    x = torch.randn(1, in_features, generator=g).bfloat16()
    enabled = torch.backends.mkldnn.enabled
    assert torch.equal(one_row_product(weight, x), torch.nn.functional.linear(x, weight))
    # fp32 sums rounded once: the float64 product rounded to bf16 (up to one rounding of the fp32 sum)
    exact = (weight.double() @ x.double().T).T
    assert ((one_row_product(weight, x).double() - exact).abs() <= exact.abs() * 2**-7 + 1e-6).all()
    assert torch.backends.mkldnn.enabled == enabled


@PACKING
@pytest.mark.parametrize("name", ["gqa", "gated", "untied"])
def test_a_bf16_fast_decoder_on_packed_weights_computes_what_it_does_unpacked(
        name: str, monkeypatch: pytest.MonkeyPatch) -> None:
    """bf16 weights (what `decode_precision` casts to) take the packed products: the same logits, bit for bit."""
    from tinylm.inference import fast_decode

    model = _model(name).to(torch.bfloat16)
    idx = torch.randint(0, model.config.vocab_size, (1, 20), generator=torch.Generator().manual_seed(1))

    def decode() -> torch.Tensor:
        with torch.inference_mode():
            decoder = FastDecoder(model, batch_size=1)
            logits = [decoder.extend(idx[:, :12], last_only=False)]
            logits += [decoder.extend(idx[:, t : t + 1]) for t in range(12, 20)]
        return torch.cat(logits, dim=1)

    packed = decode()
    monkeypatch.setattr(fast_decode, "can_pack", lambda weight: False)
    assert torch.equal(packed, decode())
    with torch.inference_mode():
        reference = model(idx)[0].float()
    assert (packed.float() - reference).abs().max() < 0.02 * reference.abs().max() + 0.1  # bf16 rounding apart


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
@pytest.mark.parametrize(("heads", "kv_heads"), [(6, 2), (4, 4), (4, 1)])
def test_one_query_attention_equals_sdpa_over_repeated_key_value_heads(dtype: torch.dtype, heads: int,
                                                                        kv_heads: int) -> None:
    """Grouped query heads entering as queries of their key/value head give SDPA's own result, bit for bit."""
    g = torch.Generator().manual_seed(0)
    q = torch.randn(2, heads, 1, 16, generator=g).to(dtype)
    keys, values = (torch.randn(2, kv_heads, 37, 16, generator=g).to(dtype) for _ in range(2))
    group = heads // kv_heads
    expected = torch.nn.functional.scaled_dot_product_attention(
        q, keys.repeat_interleave(group, 1), values.repeat_interleave(group, 1))
    got = one_query_attention(q, keys, values)
    assert got.shape == (2, heads * 16)
    assert torch.equal(got, expected.reshape(2, heads * 16))


def test_the_single_row_norm_equals_f_rms_norm() -> None:
    """One float32 row takes the mean square as a 1x1 addmm (three kernels); it is F.rms_norm's value."""
    decoder = FastDecoder(_model("gqa"), batch_size=1)
    weight = torch.randn(decoder.n_embed, generator=torch.Generator().manual_seed(2))
    for scale in (1e-3, 1.0, 30.0):
        x = scale * torch.randn(1, 1, decoder.n_embed, generator=torch.Generator().manual_seed(3))
        expected = torch.nn.functional.rms_norm(x, (decoder.n_embed,), weight, decoder.eps)
        torch.testing.assert_close(decoder.norm(x, weight), expected, rtol=1e-6, atol=1e-7)
    rows = torch.randn(2, 3, decoder.n_embed)  # several rows: F.rms_norm itself
    assert torch.equal(decoder.norm(rows, weight), torch.nn.functional.rms_norm(rows, (decoder.n_embed,), weight,
                                                                                  decoder.eps))
    from tinylm.models.modern.norm import RMSNorm  # a bf16 row: normalized in float32, as the model's RMSNorm does

    half = FastDecoder(_model("gqa").to(torch.bfloat16), batch_size=1)
    module = RMSNorm(half.n_embed, half.eps).to(torch.bfloat16)
    x = torch.randn(1, half.n_embed, generator=torch.Generator().manual_seed(4)).bfloat16() * 3
    with torch.no_grad():
        expected = module(x)
    torch.testing.assert_close(half.norm(x, module.weight), expected, rtol=2**-7, atol=0)


def test_one_token_rope_as_a_rotation_matrix_equals_the_elementwise_form() -> None:
    """x @ R[p] == x * cos[p] + rotate_half(x) * sin[p], position by position, for the model's own tables."""
    from tinylm.models.modern.rope import RotaryEmbedding, apply_rope

    rope = RotaryEmbedding(dim=16, max_positions=64)
    positions = torch.arange(64)
    cos, sin = rope(positions, torch.float32, upto=64)
    table = rotation_table(cos[0, 0], sin[0, 0])
    assert table.shape == (64, 16, 16)
    x = torch.randn(3, 5, 64, 16, generator=torch.Generator().manual_seed(0))  # [B, heads, positions, D]
    expected = apply_rope(x, cos, sin)
    got = (x.unsqueeze(-2) @ table).squeeze(-2)  # each position its own matrix
    torch.testing.assert_close(got, expected, rtol=1e-6, atol=1e-6)
    # two non-zeros per column: the rotation of each pair of dimensions, nothing else
    assert int((table[7] != 0).sum(0).max()) == 2


@pytest.mark.parametrize("name", sorted(CONFIGS))
def test_cached_greedy_equals_uncached_greedy_for_every_variant(name: str) -> None:
    """40 new tokens on a 32-token window: the comparison crosses a re-encode of the context."""
    model = _model(name)
    cached = Engine(model).generate(PROMPTS, 40, GREEDY)
    uncached = Engine(model, use_cache=False).generate(PROMPTS, 40, GREEDY)
    generic = Engine(model, fast=False).generate(PROMPTS, 40, GREEDY)
    assert cached == uncached == generic
    assert all(len(row) == 40 for row in cached)
    assert len(set(cached[0])) > 5  # a meaningful sequence, not one token repeated


@pytest.mark.parametrize("name", ["gqa", "window", "mla", "moe", "classic"])
def test_batched_generation_equals_one_prompt_at_a_time(name: str) -> None:
    model = _model(name)
    engine = Engine(model)
    batched = engine.generate(PROMPTS, 45, GREEDY)
    alone = [engine.generate([p], 45, GREEDY)[0] for p in PROMPTS]
    assert batched == alone


def test_each_sequence_stops_at_its_own_limit_or_stop_token() -> None:
    model = _model("gqa")
    engine = Engine(model)
    free = engine.generate(PROMPTS, 12, GREEDY)
    stop = free[1][4]  # the 5th token of the second sequence becomes a stop token
    out = engine.generate(PROMPTS, [12, 12, 3], GREEDY, stop_ids=[stop])
    for row, ref, limit in zip(out, free, [12, 12, 3], strict=True):
        cut = next((i for i, t in enumerate(ref[:limit]) if t == stop), limit)
        assert row == ref[:cut]
    assert len(out[1]) <= 4


def test_generation_past_the_window_matches_a_recompute_reference() -> None:
    """Past the window the context is the last `keep` tokens, re-encoded; an explicit loop agrees."""
    model = _model("gqa", context_length=16)
    prompt, keep = [5, 6, 7, 8, 9, 10], 8
    out = Engine(model, keep=keep).generate([prompt], 30, GREEDY)[0]
    seq, start = list(prompt), 0
    with torch.inference_mode():
        for _ in range(30):
            if len(seq) - start > 16:
                start = len(seq) - keep
            logits, _ = model(torch.tensor([seq[start:]]))
            seq.append(int(logits[0, -1].argmax()))
    assert out == seq[len(prompt) :]


def test_sliding_keep_equals_cropping_the_last_window_tokens() -> None:
    """keep = window is nanoGPT's crop: every step sees exactly the last `window` tokens."""
    model = _model("classic", context_length=16)
    out = Engine(model, keep=16).generate([[1, 2, 3]], 30, GREEDY)[0]
    seq = [1, 2, 3]
    with torch.inference_mode():
        for _ in range(30):
            logits, _ = model(torch.tensor([seq[-16:]]))
            seq.append(int(logits[0, -1].argmax()))
    assert out == seq[3:]


def test_stream_yields_what_generate_returns_and_sampling_is_seeded() -> None:
    model = _model("qknorm")
    engine = Engine(model)
    params = SamplingParams(temperature=0.9, top_k=20)
    a = engine.generate([PROMPTS[0]], 25, params, seed=3)[0]
    assert list(engine.stream(PROMPTS[0], 25, params, seed=3)) == a
    assert engine.generate([PROMPTS[0]], 25, params, seed=3)[0] == a
    assert engine.generate([PROMPTS[0]], 25, params, seed=4)[0] != a


def test_engine_greedy_matches_transformers_generate() -> None:
    """A reference we did not write: `transformers` Llama generate on the same weights."""
    from tinylm.interop.hf import to_hf_model

    model = _model("gqa")
    hf = to_hf_model(model).eval()
    prompt = PROMPTS[2]
    with torch.inference_mode():
        out = hf.generate(torch.tensor([prompt]), max_new_tokens=20, min_new_tokens=20, do_sample=False,
                          pad_token_id=0, eos_token_id=None)
    assert Engine(model).generate([prompt], 20, GREEDY)[0] == out[0, len(prompt) :].tolist()


def test_invalid_requests_are_refused() -> None:
    engine = Engine(_model("gqa"))
    with pytest.raises(ValueError, match="at least one token"):
        engine.generate([[]], 5)
    with pytest.raises(ValueError, match="max_new_tokens"):
        engine.generate([[1]], -1)
    assert engine.generate([[1, 2]], 0) == [[]]
