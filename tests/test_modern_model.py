"""The modern decoder's building blocks, each checked against a reference or an identity we did not pick."""

from __future__ import annotations

import math

import pytest
import torch
import torch.nn.functional as F

from model_variants import MODERN_VARIANTS, all_configs, modern_config
from tinylm.config import ModelConfig, swiglu_hidden
from tinylm.models.factory import build_model
from tinylm.models.modern.mask import attention_mask
from tinylm.models.modern.mlp import SwiGLU
from tinylm.models.modern.moe import MixtureOfExperts
from tinylm.models.modern.norm import RMSNorm
from tinylm.models.modern.rope import RotaryEmbedding, apply_rope
from tinylm.presets import preset_config

ALL = all_configs()


def _model(config: ModelConfig, seed: int = 0) -> torch.nn.Module:
    torch.manual_seed(seed)
    return build_model(config).eval()


# ---- RMSNorm ---------------------------------------------------------------------------------------
@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
def test_rmsnorm_matches_torch(dtype: torch.dtype) -> None:
    torch.manual_seed(0)
    ours, ref = RMSNorm(64, eps=1e-5), torch.nn.RMSNorm(64, eps=1e-5)
    with torch.no_grad():
        ours.weight.normal_(1.0, 0.3)
        ref.weight.copy_(ours.weight)
    ours, ref = ours.to(dtype), ref.to(dtype)
    x = (torch.randn(3, 7, 64) * 5).to(dtype)
    expected, got = ref(x), ours(x)
    assert got.dtype == dtype
    if dtype == torch.float32:
        torch.testing.assert_close(got, expected, atol=1e-6, rtol=1e-5)
    else:  # one bf16 rounding apart at most (the weight multiply happens in bf16 in ours)
        torch.testing.assert_close(got.float(), expected.float(), atol=2e-2, rtol=1.6e-2)


def test_rmsnorm_statistic_is_float32() -> None:
    """In bf16, computing the mean of squares in bf16 visibly differs; ours matches the float32 path."""
    torch.manual_seed(1)
    norm = RMSNorm(512)
    x = torch.randn(4, 512).to(torch.bfloat16) * 3
    exact = (x.float() * torch.rsqrt(x.float().pow(2).mean(-1, keepdim=True) + 1e-5)).to(torch.bfloat16)
    assert torch.equal(norm(x), exact * norm.weight)


# ---- SwiGLU ----------------------------------------------------------------------------------------
@pytest.mark.parametrize(("n_embed", "hidden"), [(128, 384), (768, 2048), (100, 320), (64, 192), (4096, 10944)])
def test_swiglu_width_rule(n_embed: int, hidden: int) -> None:
    assert swiglu_hidden(n_embed) == hidden
    assert swiglu_hidden(n_embed) % 64 == 0 and swiglu_hidden(n_embed) >= 8 * n_embed / 3
    assert ModelConfig(n_embed=n_embed, n_head=2).mlp_width == hidden


def test_swiglu_width_rule_with_llama_multiple() -> None:
    assert swiglu_hidden(4096, multiple_of=256) == 11008  # Llama 1/2 7B


def test_swiglu_formula() -> None:
    torch.manual_seed(0)
    mlp = SwiGLU(16, 48)
    x = torch.randn(2, 5, 16)
    expected = (F.silu(x @ mlp.gate.weight.T) * (x @ mlp.up.weight.T)) @ mlp.down.weight.T
    torch.testing.assert_close(mlp(x), expected)
    assert all(m.bias is None for m in (mlp.gate, mlp.up, mlp.down))


# ---- tied embeddings -------------------------------------------------------------------------------
def test_tied_embeddings_share_one_parameter_and_untying_adds_vocab_times_embed() -> None:
    tied = build_model(preset_config("tiny", "modern"))
    untied = build_model(preset_config("tiny", "modern", tie_embeddings=False))
    assert tied.lm_head.weight is tied.token_embed.weight
    assert untied.lm_head.weight is not untied.token_embed.weight
    assert untied.num_params() - tied.num_params() == 4096 * 128
    assert tied.num_params() == 1_311_872


# ---- initialization --------------------------------------------------------------------------------
def test_init_statistics_follow_gpt2_rule() -> None:
    torch.manual_seed(0)
    config = ModelConfig(vocab_size=2048, n_embed=256, n_head=4, n_blocks=8, n_kv_head=2)
    model = build_model(config)
    residual_std = 0.02 / math.sqrt(2 * 8)
    for name, p in model.named_parameters():
        if p.dim() == 1:
            assert torch.all(p == 1), f"{name}: norm weights start at one"
            continue
        expected = residual_std if name.endswith(("o_proj.weight", "down.weight")) else 0.02
        assert abs(p.std().item() - expected) < 0.05 * expected, f"{name}: std {p.std().item():.5f} != {expected}"
        assert abs(p.mean().item()) < 0.1 * expected, name
    assert not any(m.bias is not None for m in model.modules() if isinstance(m, torch.nn.Linear)), "no biases"


@pytest.mark.parametrize("arch", ["modern", "classic"])
def test_zero_init_head_starts_an_untied_head_at_zero_and_the_loss_at_ln_v(arch: str) -> None:
    torch.manual_seed(0)
    config = preset_config("tiny", arch, vocab_size=512, n_blocks=2, tie_embeddings=False, zero_init_head=True)
    model = build_model(config)
    assert torch.count_nonzero(model.lm_head.weight) == 0
    assert model.token_embed.weight.std().item() > 0.015  # the embedding keeps its own N(0, 0.02)
    idx = torch.randint(0, 512, (2, 16))
    _, loss = model(idx, idx)
    assert abs(loss.item() - math.log(512)) < 1e-5  # every logit 0: exactly ln V (a head bias starts at zero too)
    with pytest.raises(ValueError, match="zero_init_head.*tie_embeddings=False"):
        preset_config("tiny", "modern", zero_init_head=True)


def test_residual_scaling_depends_on_depth() -> None:
    torch.manual_seed(0)
    stds = {}
    for n_blocks in (2, 32):
        model = build_model(ModelConfig(vocab_size=64, n_embed=256, n_head=4, n_blocks=n_blocks))
        stds[n_blocks] = torch.cat([b.mlp.down.weight.flatten() for b in model.blocks]).std().item()
    assert stds[2] / stds[32] == pytest.approx(math.sqrt(32 / 2), rel=0.05)


# ---- every variant ---------------------------------------------------------------------------------
@pytest.mark.parametrize("name", list(ALL))
def test_forward_shapes_and_loss(name: str) -> None:
    config = ALL[name].replace(vocab_size=4096)
    model = _model(config)
    torch.manual_seed(1)
    idx = torch.randint(0, config.vocab_size, (3, 24))
    targets = torch.randint(0, config.vocab_size, (3, 24))
    logits, loss = model(idx, targets)
    assert logits.shape == (3, 24, config.vocab_size)
    assert abs(loss.item() - math.log(config.vocab_size)) < 0.5  # ln(4096) = 8.32
    assert model(idx)[1] is None
    hidden = model.forward_hidden(idx)
    assert hidden.shape == (3, 24, config.n_embed)
    torch.testing.assert_close(model.logits(hidden), logits)


@pytest.mark.parametrize("name", list(ALL))
def test_causality(name: str) -> None:
    model = _model(ALL[name])
    torch.manual_seed(2)
    idx = torch.randint(0, 97, (2, 20))
    changed = idx.clone()
    changed[:, 12:] = (changed[:, 12:] + 1) % 97
    with torch.no_grad():
        a, b = model(idx)[0], model(changed)[0]
    torch.testing.assert_close(a[:, :12], b[:, :12], atol=1e-6, rtol=0)
    assert (a[:, 12:] - b[:, 12:]).abs().max() > 1e-3


@pytest.mark.parametrize("name", list(MODERN_VARIANTS))
def test_kv_cache_prefill_then_decode_equals_full_forward(name: str) -> None:
    model = _model(modern_config(name))
    torch.manual_seed(3)
    idx = torch.randint(0, 97, (2, 20))
    with torch.no_grad():
        full = model(idx)[0]
        cache = model.new_cache(batch_size=2)
        steps = [model.logits(model.forward_hidden(idx[:, :8], cache))]
        for t in range(8, 20):
            steps.append(model.logits(model.forward_hidden(idx[:, t : t + 1], cache)))
    assert cache.length == 20
    torch.testing.assert_close(torch.cat(steps, dim=1), full, atol=1e-5, rtol=1e-5)


def test_left_padded_batch_equals_each_sequence_alone() -> None:
    model = _model(modern_config("window"))
    torch.manual_seed(4)
    short, long = torch.randint(0, 97, (1, 6)), torch.randint(0, 97, (1, 11))
    pad = 11 - 6
    batch = torch.cat([torch.cat([torch.zeros(1, pad, dtype=torch.long), short], 1), long])
    valid = torch.ones(2, 11, dtype=torch.bool)
    valid[0, :pad] = False
    positions = (valid.long().cumsum(1) - 1).clamp(min=0)
    with torch.no_grad():
        cache = model.new_cache(2)
        batched = model.logits(model.forward_hidden(batch, cache, positions, valid))
        step = model.logits(model.forward_hidden(torch.tensor([[5], [7]]), cache, positions[:, -1:] + 1))
        alone_short = model(torch.cat([short, torch.tensor([[5]])], 1))[0]
        alone_long = model(torch.cat([long, torch.tensor([[7]])], 1))[0]
    torch.testing.assert_close(batched[0, pad:], alone_short[0, :6], atol=1e-5, rtol=1e-5)
    torch.testing.assert_close(batched[1], alone_long[0, :11], atol=1e-5, rtol=1e-5)
    torch.testing.assert_close(step[0, 0], alone_short[0, 6], atol=1e-5, rtol=1e-5)
    torch.testing.assert_close(step[1, 0], alone_long[0, 11], atol=1e-5, rtol=1e-5)


# ---- attention variants ----------------------------------------------------------------------------
def test_gqa_equals_mha_with_repeated_kv_heads() -> None:
    gqa = _model(modern_config("gqa"))
    mha = build_model(modern_config("mha")).eval()
    state = gqa.state_dict()
    head_dim, repeats = 8, 2
    for key, value in list(state.items()):
        if key.endswith(("k_proj.weight", "v_proj.weight")):  # [kv_heads*hd, C] -> [heads*hd, C]
            per_head = value.view(-1, head_dim, value.shape[1])
            state[key] = per_head.repeat_interleave(repeats, 0).reshape(-1, value.shape[1])
    mha.load_state_dict(state)
    idx = torch.randint(0, 97, (2, 16))
    with torch.no_grad():
        torch.testing.assert_close(gqa(idx)[0], mha(idx)[0], atol=1e-5, rtol=1e-5)


def test_rope_is_a_rotation_that_depends_only_on_relative_position() -> None:
    rope = RotaryEmbedding(16, 64, theta=10000.0)
    torch.manual_seed(5)
    q, k = torch.randn(1, 1, 1, 16), torch.randn(1, 1, 1, 16)

    def rotated(x: torch.Tensor, pos: int) -> torch.Tensor:
        cos, sin = rope(torch.tensor([pos]), torch.float32, upto=pos + 1)
        return apply_rope(x, cos, sin)

    def score(m: int, n: int) -> float:
        return (rotated(q, m) * rotated(k, n)).sum().item()

    assert score(10, 3) == pytest.approx(score(27, 20), abs=1e-4)
    assert score(5, 5) == pytest.approx((q * k).sum().item(), abs=1e-4)
    assert score(10, 3) != pytest.approx(score(10, 4), abs=1e-3)
    for pos in (0, 7, 63):  # a rotation keeps lengths
        assert rotated(q, pos).norm().item() == pytest.approx(q.norm().item(), rel=1e-5)


def test_rope_pairs_dimension_i_with_i_plus_half() -> None:
    rope = RotaryEmbedding(8, 16)
    x = torch.zeros(1, 1, 1, 8)
    x[..., 1] = 1.0  # only dimension 1 set: rotation moves it into dimension 1 + 4
    cos, sin = rope(torch.tensor([3]), torch.float32, upto=4)
    out = apply_rope(x, cos, sin)[0, 0, 0]
    nonzero = set(torch.nonzero(out.abs() > 1e-6).flatten().tolist())
    assert nonzero == {1, 5}


def test_sliding_window_bounds_the_receptive_field() -> None:
    model = _model(modern_config("window", n_blocks=1))  # window 5: position t sees t-4 .. t
    idx = torch.randint(0, 97, (1, 20))
    changed = idx.clone()
    changed[0, 6] = (changed[0, 6] + 1) % 97
    with torch.no_grad():
        diff = (model(idx)[0] - model(changed)[0]).abs().amax(-1)[0]
    affected = set(torch.nonzero(diff > 1e-6).flatten().tolist())
    assert affected == set(range(6, 11))


def test_segment_mask_is_causal_within_each_segment_and_window() -> None:
    segments = torch.tensor([[0, 0, 0, 1, 1, -1]])
    mask, is_causal = attention_mask(6, 0, 2, None, torch.device("cpu"), segments)
    expected = torch.zeros(6, 6, dtype=torch.bool)
    for q in range(6):
        for k in range(6):
            expected[q, k] = k <= q and q - k < 2 and segments[0, q] == segments[0, k]
    assert not is_causal and torch.equal(mask[0, 0], expected)
    # without segments, padding or a biting window: no mask tensor, the fused causal kernel
    assert attention_mask(6, 0, None, None, torch.device("cpu")) == (None, True)
    assert attention_mask(6, 0, 8, None, torch.device("cpu")) == (None, True)


@pytest.mark.parametrize("name", ["gqa", "window", "mla", "classic"])
def test_packed_positions_and_segments_reproduce_each_sequence_alone(name: str) -> None:
    model = _model(ALL[name])
    first, second = torch.randint(0, 97, (1, 9)), torch.randint(0, 97, (1, 7))
    row = torch.cat([first, second], 1)
    positions = torch.cat([torch.arange(9), torch.arange(7)])[None]
    segments = torch.tensor([[0] * 9 + [1] * 7])
    with torch.no_grad():
        packed = model(row, positions=positions, segments=segments)[0]
        torch.testing.assert_close(packed[:, :9], model(first)[0], atol=1e-5, rtol=1e-5)
        torch.testing.assert_close(packed[:, 9:], model(second)[0], atol=1e-5, rtol=1e-5)


def test_output_gate_scales_heads() -> None:
    model = _model(modern_config("gated", n_blocks=1))
    attn = model.blocks[0].attn
    x = torch.rand(2, 6, 32) + 0.1  # positive inputs
    cos, sin = model.rope(torch.arange(6), torch.float32, upto=6)
    with torch.no_grad():
        open_gate = attn(x, cos, sin, None, True)
        attn.gate_proj.weight.fill_(-1e4)  # sigmoid(W x) -> 0: every head switched off
        closed_gate = attn(x, cos, sin, None, True)
    assert open_gate.abs().max() > 1e-4
    assert closed_gate.abs().max() < 1e-6


def test_mla_caches_at_least_three_times_fewer_bytes_than_mha() -> None:
    base = dict(vocab_size=256, n_embed=256, n_head=8, n_blocks=2)
    mha = build_model(ModelConfig(**base))
    mla = build_model(ModelConfig(**base, attention="mla", kv_lora_rank=64, qk_rope_head_dim=16))
    mha_bytes, mla_bytes = mha.new_cache(1).bytes_per_token(), mla.new_cache(1).bytes_per_token()
    assert mha_bytes == 2 * 2 * 256 * 4  # layers * (k, v) * n_embed * fp32
    assert mla_bytes == 2 * (64 + 16) * 4
    assert mha_bytes / mla_bytes >= 3


# ---- mixture of experts ----------------------------------------------------------------------------
def test_moe_token_counts_and_aux_loss_gradient_reaches_router() -> None:
    torch.manual_seed(6)
    config = modern_config("moe")
    moe = MixtureOfExperts(config)
    x = torch.randn(3, 10, 32)
    out, aux = moe(x)
    assert out.shape == x.shape
    assert moe.tokens_per_expert.sum().item() == 30 * config.n_experts_per_token
    aux.backward()
    assert moe.router.weight.grad is not None and moe.router.weight.grad.abs().sum() > 0
    assert all(p.grad is None for p in moe.experts.parameters())  # the aux loss only trains the router


def test_moe_aux_loss_is_one_when_balanced() -> None:
    """n_experts * sum f_i P_i == 1 exactly when routing and probabilities are uniform."""
    moe = MixtureOfExperts(modern_config("moe", moe_aux_loss_coef=1.0))
    with torch.no_grad():
        moe.router.weight.zero_()  # uniform probabilities; top-k ties resolved by index
    _, aux = moe(torch.randn(1, 8, 32))
    f = moe.tokens_per_expert.float() / moe.tokens_per_expert.sum()
    assert aux.item() == pytest.approx(4 * (f * 0.25).sum().item())
    assert aux.item() == pytest.approx(1.0)


def test_moe_output_equals_weighted_experts() -> None:
    torch.manual_seed(7)
    moe = MixtureOfExperts(modern_config("moe_shared"))
    x = torch.randn(5, 32)
    out, _ = moe(x[None])
    probs = F.softmax(moe.router(x), -1)
    top = probs.argmax(-1)
    for i in range(5):
        shared = torch.sigmoid(moe.shared_gate(x[i])) * moe.shared(x[i])
        torch.testing.assert_close(out[0, i], moe.experts[int(top[i])](x[i]) + shared, atol=1e-5, rtol=1e-5)


def test_moe_loss_includes_aux_only_in_training() -> None:
    model = _model(modern_config("moe"))
    idx = torch.randint(0, 97, (2, 12))
    with torch.no_grad():
        eval_loss = model(idx, idx)[1]
        model.train()
        train_loss = model(idx, idx)[1]
    assert train_loss > eval_loss


def test_moe_active_params() -> None:
    config = modern_config("moe")
    model = build_model(config)
    per_expert = 3 * 32 * 32
    inactive = config.n_blocks * (config.n_experts - config.n_experts_per_token) * per_expert
    assert model.num_params() - model.num_params(active=True) == inactive


# ---- training features -----------------------------------------------------------------------------
@pytest.mark.parametrize("name", ["gqa", "mla", "moe"])
def test_gradient_checkpointing_gives_identical_gradients(name: str) -> None:
    grads = []
    for checkpointing in (False, True):
        model = _model(modern_config(name, gradient_checkpointing=checkpointing)).train()
        torch.manual_seed(8)
        idx = torch.randint(0, 97, (2, 16))
        model(idx, idx)[1].backward()
        grads.append({n: p.grad.clone() for n, p in model.named_parameters() if p.grad is not None})
    assert grads[0].keys() == grads[1].keys()
    for key in grads[0]:
        torch.testing.assert_close(grads[0][key], grads[1][key], atol=1e-6, rtol=1e-5)


def test_dropout_only_in_training() -> None:
    model = _model(modern_config("gqa", dropout=0.2))
    idx = torch.randint(0, 97, (2, 16))
    with torch.no_grad():
        torch.testing.assert_close(model(idx)[0], model(idx)[0])
        model.train()
        assert not torch.allclose(model(idx)[0], model(idx)[0])


# ---- config validation and accounting --------------------------------------------------------------
@pytest.mark.parametrize(
    ("changes", "field"),
    [
        (dict(n_kv_head=3), "n_kv_head"),
        (dict(n_head=5), "n_head"),
        (dict(n_experts=4, n_experts_per_token=5), "n_experts_per_token"),
        (dict(dropout=1.5), "dropout"),
        (dict(sliding_window=0), "sliding_window"),
        (dict(vocab_size=0), "vocab_size"),
        (dict(n_embed=36, n_head=4, head_dim=None), "head_dim"),
        (dict(attention="mla", qk_rope_head_dim=3), "qk_rope_head_dim"),
    ],
)
def test_impossible_config_names_field_and_rule(changes: dict, field: str) -> None:
    with pytest.raises(ValueError, match=rf"invalid config: {field}="):
        ModelConfig(**changes)


def test_flops_per_token_formula() -> None:
    model = build_model(preset_config("tiny", "modern"))
    n_matmul = model.num_params() - 4096 * 128 + 4096 * 128  # non-embedding + the tied head
    attention = 6 * 4 * 256 * 4 * (2 * 32)
    assert model.flops_per_token(256) == 6 * n_matmul + attention
    assert model.num_params(non_embedding=True) == 1_311_872 - 4096 * 128
