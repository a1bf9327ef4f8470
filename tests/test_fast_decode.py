"""The fast decoder declares what it supports, and over every test variant it either matches the model or declines.

A variant the fast decoder takes must give the model's own logits (prefill, then token by token, at
batch 1, batch 2 and a left-padded batch 2); one it declines must say why, and the runner the
engine uses instead must give the model's logits. Models use a large init_std, as in test_engine.py,
so that the logits are far from uniform.
"""

from __future__ import annotations

import dataclasses

import pytest
import torch

from model_variants import all_configs, modern_config
from tinylm.config import ModelConfig
from tinylm.inference import fast_decode, fast_decode_support
from tinylm.inference.fast_decode import FastDecoder, refusal
from tinylm.inference.fast_decode_support import HANDLED, IRRELEVANT, unsupported_features
from tinylm.inference.packed_float import onednn_linear_available, packed_float_product
from tinylm.inference.runners import ModelCacheRunner, RecomputeRunner, make_runner, runner_choice
from tinylm.models.factory import build_model

CONFIGS = all_configs()
DECLINED = {"mla", "mla_qlora", "classic", "classic_sdpa"}  # the variants the fast decoder refuses, on purpose
PREFILL, LENGTH = 12, 20


def _model(config: ModelConfig) -> torch.nn.Module:
    torch.manual_seed(0)
    return build_model(config.replace(init_std=0.4)).eval()


def test_every_model_config_field_is_classified_once() -> None:
    """The pointer: a new ModelConfig field fails here until fast_decode_support.py says how decoding treats it."""
    names = {f.name for f in dataclasses.fields(ModelConfig)}
    assert not set(HANDLED) & set(IRRELEVANT), "a field is both handled and irrelevant"
    assert names - set(HANDLED) - set(IRRELEVANT) == set(), "classify these in inference/fast_decode_support.py"
    assert set(HANDLED) | set(IRRELEVANT) <= names, "fast_decode_support.py names fields ModelConfig no longer has"
    assert all(reason for reason in IRRELEVANT.values())


def test_an_unclassified_field_is_refused_not_guessed(monkeypatch: pytest.MonkeyPatch) -> None:
    config = modern_config("gqa")
    assert unsupported_features(config) == []
    monkeypatch.delitem(fast_decode_support.HANDLED, "qk_norm")
    assert unsupported_features(config) == ["qk_norm=False (a field fast_decode_support.py does not classify yet)"]


def test_a_refused_value_names_the_field_and_what_is_handled() -> None:
    assert unsupported_features(CONFIGS["mla"]) == ["attention='mla' (handled: 'standard')"]
    assert unsupported_features(CONFIGS["classic"]) == ["arch='classic' (handled: 'modern')"]
    with pytest.raises(ValueError, match="attention='mla'"):
        FastDecoder(_model(CONFIGS["mla"]), batch_size=1)


def test_the_engine_says_which_path_it_takes_and_why() -> None:
    factory, why = runner_choice(_model(CONFIGS["mla"]))
    assert factory is ModelCacheRunner and "the fast decoder does not handle attention='mla'" in why
    factory, why = runner_choice(_model(CONFIGS["gqa"]))
    assert factory is FastDecoder and "fast decoder" in why
    assert runner_choice(_model(CONFIGS["gqa"]), fast=False)[0] is ModelCacheRunner
    assert runner_choice(_model(CONFIGS["classic"]))[0] is RecomputeRunner


@pytest.mark.parametrize("name", sorted(CONFIGS))
def test_the_declined_variants_are_exactly_the_expected_ones(name: str) -> None:
    """Neither a silent refusal (a slower path for a variant it handles) nor a silent acceptance."""
    reason = refusal(_model(CONFIGS[name]))
    assert (reason is not None) == (name in DECLINED), reason


def _inputs(layout: str, vocab: int) -> tuple[torch.Tensor, torch.Tensor | None, torch.Tensor | None]:
    """(idx [B, LENGTH], positions, valid): batch 1, batch 2, or batch 2 with the first row left-padded by 3.

    Batch 1 is its own case: one row takes the single-row norm and the rotation-matrix RoPE.
    """
    batch = 1 if layout == "batch1" else 2
    idx = torch.randint(0, vocab, (batch, LENGTH), generator=torch.Generator().manual_seed(1))
    if layout != "padded":
        return idx, None, None
    valid = torch.ones(batch, LENGTH, dtype=torch.bool)
    valid[0, :3] = False
    return idx, (valid.long().cumsum(1) - 1).clamp(min=0), valid


def _decode(runner, idx: torch.Tensor, positions: torch.Tensor | None, valid: torch.Tensor | None) -> torch.Tensor:
    """Logits of every token: a prefill of PREFILL tokens, then one token per call, as the engine feeds them."""
    pre = slice(0, PREFILL)
    logits = [runner.extend(idx[:, pre], None if positions is None else positions[:, pre],
                            None if valid is None else valid[:, pre], last_only=False)]
    for t in range(PREFILL, LENGTH):
        logits.append(runner.extend(idx[:, t : t + 1], None if positions is None else positions[:, t : t + 1]))
    return torch.cat(logits, dim=1)


@pytest.mark.parametrize("copy", ["trainable", "decodes-only", "verifier"])
@pytest.mark.parametrize("layout", ["batch1", "batch2", "padded"])
@pytest.mark.parametrize("name", sorted(CONFIGS))
def test_every_variant_decodes_the_models_logits(name: str, layout: str, copy: str) -> None:
    """Every layout: a trainable model's own weights, a decode-only copy's, laid out column-major, and a decode-only
    copy's packed by oneDNN for 5 rows a call (speculative decoding's target, packed_float.py)."""
    model = _model(CONFIGS[name]).requires_grad_(copy == "trainable")
    idx, positions, valid = _inputs(layout, model.config.vocab_size)
    with torch.inference_mode():
        reference = model.logits(model.forward_hidden(idx, positions=positions, valid=valid))
        runner = make_runner(model, idx.shape[0], rows_per_call=5 if copy == "verifier" else 1)  # as the engine does
        got = _decode(runner, idx, positions, valid)
    if refusal(model) is None:
        assert isinstance(runner, FastDecoder)
    else:
        assert not isinstance(runner, FastDecoder)
    torch.testing.assert_close(got, reference, atol=1e-4, rtol=1e-4)


def test_a_decode_only_copy_is_laid_out_column_major_in_place_and_a_trainable_one_is_left_alone() -> None:
    """row_products.py: an inference copy's float32 projections become column-major (the module's weight a view of
    that storage, nothing held twice); a tied head reads a column-major copy; a model being trained keeps its
    tensors."""
    config = CONFIGS["gqa"]
    trainable = _model(config)
    FastDecoder(trainable, 1)  # (q, k, v and gate, up become row blocks of fused matrices, each still row-major)
    assert all(p.is_contiguous() for p in trainable.parameters())

    decoding = _model(config).requires_grad_(False)
    values = {name: p.detach().clone() for name, p in decoding.named_parameters()}
    decoder = FastDecoder(decoding, 1)
    attn, mlp = decoding.blocks[0].attn, decoding.blocks[0].mlp
    for linear in (attn.q_proj, attn.k_proj, attn.v_proj, attn.o_proj, mlp.gate, mlp.up, mlp.down):
        assert linear.weight.stride()[0] == 1 and not linear.weight.is_contiguous(), linear
    # q, k and v are column slices of one [in, q + k + v] matrix: each a view of the same storage
    assert attn.q_proj.weight.untyped_storage().data_ptr() == attn.v_proj.weight.untyped_storage().data_ptr()
    assert decoding.token_embed.weight.stride() == (config.n_embed, 1)  # the table itself stays row-major
    for name, p in decoding.named_parameters():
        assert torch.equal(p, values[name]), name  # the same numbers, only laid out otherwise
    ids = torch.tensor([[1, 2, 3, 4]])
    with torch.inference_mode():
        reference = decoding.logits(decoding.forward_hidden(ids))
        torch.testing.assert_close(decoder.extend(ids, last_only=False), reference, atol=1e-5, rtol=1e-5)


@pytest.mark.skipif(not onednn_linear_available(), reason="this torch has no oneDNN linear ops")
def test_a_verifier_multiplies_every_projection_through_weights_packed_for_its_rows(monkeypatch) -> None:
    """packed_float.py: a decode-only copy asked for 5 rows a call packs every projection and the head for 5 rows
    (none when asked for one row, nor for a trainable model); a pass of 5 tokens gives the model's logits."""
    packed: list[tuple[tuple[int, ...], int]] = []

    def counting(weight: torch.Tensor, rows: int):
        packed.append((tuple(weight.shape), rows))
        return packed_float_product(weight, rows)

    monkeypatch.setattr(fast_decode, "packed_float_product", counting)
    config = CONFIGS["gqa"]
    FastDecoder(_model(config).requires_grad_(False), 1)
    FastDecoder(_model(config), 1, rows_per_call=5)
    assert packed == []
    model = _model(config).requires_grad_(False)
    decoder = FastDecoder(model, 1, rows_per_call=5)
    C, D = config.n_embed, config.dim_per_head
    qkv = ((config.n_head + 2 * config.kv_heads) * D, C)
    per_block = [qkv, (C, config.n_head * D), (2 * model.blocks[0].mlp.up.out_features, C),
                 (C, model.blocks[0].mlp.up.out_features)]
    assert packed == [(shape, 5) for shape in per_block * config.n_blocks + [(config.vocab_size, C)]]
    ids = torch.randint(0, config.vocab_size, (1, 9), generator=torch.Generator().manual_seed(2))
    with torch.inference_mode():
        reference = model.logits(model.forward_hidden(ids))
        got = torch.cat([decoder.extend(ids[:, :4], last_only=False), decoder.extend(ids[:, 4:], last_only=False)], 1)
    torch.testing.assert_close(got, reference, atol=1e-5, rtol=1e-5)
