"""LoRA adapters: a fresh adapter changes nothing, only adapters train, merging is exact, state round-trips.

The merge is checked against the unmerged forward pass (two different computations of the same
function), `merged_weights` against `merge_lora`, and the mapping of targets to layers against the
module names of every architecture. PEFT itself is the reference in tests/test_peft_export.py.
"""

from __future__ import annotations

import copy
import json
import math
from pathlib import Path

import pytest
import torch
from torch import nn

from model_variants import classic_config, modern_config
from test_sft import sft_args
from tinylm.cli.main import main
from tinylm.errors import TinyLMError
from tinylm.models.factory import build_model
from tinylm.models.lora import (
    LoraConfig,
    LoRALinear,
    apply_lora,
    base_state_dict,
    count_trainable,
    has_lora,
    load_lora_state_dict,
    lora_parameters,
    lora_state_dict,
    merge_lora,
    merged_weights,
    parse_targets,
)
from tinylm.stages.sft.config import SFTConfig

VARIANTS = ["gqa", "qknorm", "gated", "mla", "mla_qlora", "moe", "moe_shared", "untied", "classic"]


def config_of(variant: str):
    return classic_config() if variant == "classic" else modern_config(variant)


def tokens(model: nn.Module, seed: int = 1) -> torch.Tensor:
    torch.manual_seed(seed)
    return torch.randint(0, model.config.vocab_size, (2, 16))


def logits(model: nn.Module, idx: torch.Tensor) -> torch.Tensor:
    with torch.no_grad():
        return model(idx)[0]


def with_random_adapters(model: nn.Module, seed: int = 2) -> nn.Module:
    """B = 0 would make every adapter invisible; random B makes each one change the output."""
    torch.manual_seed(seed)
    with torch.no_grad():
        for m in model.modules():
            if isinstance(m, LoRALinear):
                m.lora_B.normal_(0.0, 0.02)
    return model


@pytest.mark.parametrize("variant", VARIANTS)
def test_fresh_adapter_changes_nothing(variant: str) -> None:
    torch.manual_seed(0)
    model = build_model(config_of(variant)).eval()
    idx = tokens(model)
    before = logits(model, idx)
    wrapped = apply_lora(model, LoraConfig(rank=4, alpha=16))
    assert wrapped and has_lora(model)
    assert all(isinstance(model.get_submodule(name), LoRALinear) for name in wrapped)
    assert torch.equal(logits(model, idx), before)


@pytest.mark.parametrize("variant", ["gqa", "classic"])
def test_only_adapters_train(variant: str) -> None:
    torch.manual_seed(0)
    model = build_model(config_of(variant))
    base = {k: v.clone() for k, v in base_state_dict(model).items()}
    apply_lora(model, LoraConfig(rank=2))
    trainable = [p for p in model.parameters() if p.requires_grad]
    adapters = lora_parameters(model)
    assert {id(p) for p in trainable} == {id(p) for p in adapters}
    rank2 = sum(2 * (m.in_features + m.out_features) for m in model.modules() if isinstance(m, LoRALinear))
    assert count_trainable(model) == rank2

    optimizer = torch.optim.AdamW(trainable, lr=1e-2)
    assert {id(p) for group in optimizer.param_groups for p in group["params"]} == {id(p) for p in adapters}
    idx = tokens(model)
    for _ in range(2):  # the first step moves only B (A's gradient is zero while B is), the second A too
        optimizer.zero_grad()
        model(idx, idx)[1].backward()
        optimizer.step()
    assert all(torch.equal(v, base[k]) for k, v in base_state_dict(model).items())
    assert all(p.grad is None for p in model.parameters() if not p.requires_grad)
    assert all(m.lora_B.abs().max() > 0 for m in model.modules() if isinstance(m, LoRALinear))


@pytest.mark.parametrize("variant", VARIANTS)
@pytest.mark.parametrize("rslora", [False, True])
def test_merge_equals_unmerged(variant: str, rslora: bool) -> None:
    torch.manual_seed(0)
    model = build_model(config_of(variant)).eval()
    apply_lora(model, LoraConfig(rank=4, alpha=8, rslora=rslora, targets="all-linear"))
    with_random_adapters(model)
    idx = tokens(model)
    unmerged = logits(model, idx)
    plain = build_model(config_of(variant)).eval()
    assert not torch.allclose(unmerged, logits(plain, idx), atol=1e-3)  # the adapters matter

    merged = merge_lora(model)
    assert not has_lora(merged)
    assert all(type(m) is nn.Linear for name, m in merged.named_modules() if name.endswith(("proj", "gate", "up")))
    if merged.config.tie_embeddings:
        assert merged.lm_head.weight is merged.token_embed.weight
    assert all(p.requires_grad for p in merged.parameters())
    assert (logits(merged, idx) - unmerged).abs().max().item() < 1e-6
    assert set(merged.state_dict()) == set(plain.state_dict())


@pytest.mark.parametrize("variant", ["qknorm", "moe", "classic"])
def test_merged_weights_from_tensors_equal_merge_lora(variant: str) -> None:
    torch.manual_seed(0)
    model = build_model(config_of(variant))
    cfg = LoraConfig(rank=3, alpha=5.0, rslora=True)
    apply_lora(model, cfg)
    with_random_adapters(model)
    base, lora = base_state_dict(model), lora_state_dict(model)
    from_tensors = merged_weights({k: v.clone() for k, v in base.items()}, lora, cfg.scale)
    merged = merge_lora(copy.deepcopy(model)).state_dict()
    assert set(from_tensors) == set(merged)
    assert all(torch.equal(from_tensors[k], merged[k]) for k in merged)
    with pytest.raises(TinyLMError, match="malformed"):
        merged_weights(base, {k: v for k, v in lora.items() if not k.endswith("lora_B")}, cfg.scale)


def test_merged_weights_closed_form() -> None:
    W, A, B = torch.randn(6, 5), torch.randn(2, 5), torch.randn(6, 2)
    cfg = LoraConfig(rank=2, alpha=3.0)
    out = merged_weights({"layer.weight": W}, {"layer.lora_A": A, "layer.lora_B": B}, cfg.scale)
    expected = W + 1.5 * torch.einsum("or,ri->oi", B, A)
    assert torch.allclose(out["layer.weight"], expected, atol=1e-6)


def test_dropout_only_in_training() -> None:
    torch.manual_seed(0)
    model = build_model(modern_config("gqa")).eval()
    apply_lora(model, LoraConfig(rank=4, dropout=0.5))
    assert not any(m.training for m in model.modules())  # adapters added to an eval model start in eval
    with_random_adapters(model)
    no_dropout = copy.deepcopy(model)
    for m in no_dropout.modules():
        if isinstance(m, LoRALinear):
            m.lora_dropout = nn.Identity()
    idx = tokens(model)
    model.eval()
    assert torch.equal(logits(model, idx), logits(no_dropout.eval(), idx))
    model.train()
    first, second = logits(model, idx), logits(model, idx)
    assert not torch.allclose(first, second)
    assert not torch.allclose(first, logits(no_dropout.eval(), idx))


def test_dropout_applies_to_the_adapter_input_only() -> None:
    """Closed form on one layer: in training, y = x W^T + (mask * x / (1 - p)) A^T B^T * scale."""
    layer = LoRALinear(nn.Linear(8, 6, bias=True), rank=2, scale=0.5, dropout=0.25).train()
    with torch.no_grad():
        layer.lora_B.normal_()
    x = torch.randn(3, 8)
    torch.manual_seed(7)
    y = layer(x)
    torch.manual_seed(7)
    kept = nn.functional.dropout(x, 0.25, training=True)
    expected = x @ layer.weight.T + layer.bias + 0.5 * (kept @ layer.lora_A.T @ layer.lora_B.T)
    assert torch.allclose(y, expected, atol=1e-6)


def test_lora_state_dict_round_trip(tmp_path) -> None:
    from safetensors.torch import load_file, save_file

    torch.manual_seed(0)
    cfg = LoraConfig(rank=4, targets=("q", "v", "down"))
    trained = build_model(modern_config("gqa")).eval()
    apply_lora(trained, cfg)
    with_random_adapters(trained)
    state = lora_state_dict(trained)
    assert set(state) == {f"blocks.{i}.{layer}.{part}" for i in range(2)
                          for layer in ("attn.q_proj", "attn.v_proj", "mlp.down") for part in ("lora_A", "lora_B")}
    save_file({k: v.contiguous() for k, v in state.items()}, str(tmp_path / "adapter.safetensors"))

    torch.manual_seed(0)
    fresh = build_model(modern_config("gqa")).eval()  # the same base (same seed), a new adapter
    apply_lora(fresh, LoraConfig.from_dict(json.loads(json.dumps(cfg.to_dict()))))
    load_lora_state_dict(fresh, load_file(str(tmp_path / "adapter.safetensors")))
    idx = tokens(fresh)
    assert torch.equal(logits(fresh, idx), logits(trained, idx))
    with pytest.raises(TinyLMError, match="does not fit"):
        load_lora_state_dict(fresh, {k: v for k, v in state.items() if ".q_proj." not in k})


def test_config_defaults_and_round_trip() -> None:
    assert LoraConfig(rank=8).scale == 1.0  # alpha defaults to the rank
    assert LoraConfig(rank=4, alpha=16).scale == 4.0
    assert LoraConfig(rank=4, alpha=16, rslora=True).scale == 16 / math.sqrt(4)
    configs = (LoraConfig(rank=2, alpha=3.5, dropout=0.1, targets=("q", "o")), LoraConfig(rank=1, targets="all-linear"))
    for cfg in configs:
        assert LoraConfig.from_dict(json.loads(json.dumps(cfg.to_dict()))) == cfg
    assert parse_targets("q, v,down") == ("q", "v", "down")
    assert parse_targets("all-linear") == "all-linear"
    with pytest.raises(TinyLMError, match="unknown field"):
        LoraConfig.from_dict({"rank": 2, "lora_rank": 2})
    with pytest.raises(TinyLMError, match="no rank"):
        LoraConfig.from_dict({"alpha": 2})


@pytest.mark.parametrize(
    ("variant", "targets", "expected"),
    [
        ("gqa", ("q", "v"), ["attn.q_proj", "attn.v_proj"]),
        ("moe_shared", ("gate",), ["mlp.experts.0.gate", "mlp.experts.1.gate", "mlp.experts.2.gate",
                                   "mlp.experts.3.gate", "mlp.shared.gate"]),
        ("mla", ("q", "k"), ["attn.q_proj", "attn.kv_a_proj", "attn.kv_b_proj"]),
        ("mla_qlora", ("q",), ["attn.q_a_proj", "attn.q_b_proj"]),
        ("classic", ("q", "k", "v", "o", "gate", "up", "down"), ["attn.qkv", "attn.o_proj", "mlp.hidden", "mlp.proj"]),
        ("gated", "all-linear", ["attn.q_proj", "attn.k_proj", "attn.v_proj", "attn.o_proj", "attn.gate_proj",
                                 "mlp.gate", "mlp.up", "mlp.down"]),
    ],
)
def test_targets_select_the_named_layers(variant: str, targets, expected: list[str]) -> None:
    model = build_model(config_of(variant))
    wrapped = apply_lora(model, LoraConfig(rank=2, targets=targets))
    assert wrapped == [f"blocks.{i}.{name}" for i in range(2) for name in expected]
    assert "lm_head" not in wrapped


def test_all_linear_includes_the_router_but_not_the_head() -> None:
    model = build_model(modern_config("moe", tie_embeddings=False))
    wrapped = apply_lora(model, LoraConfig(rank=2, targets="all-linear"))
    assert "blocks.0.mlp.router" in wrapped and "lm_head" not in wrapped


@pytest.mark.parametrize(
    ("variant", "cfg", "message"),
    [
        ("gqa", dict(rank=0), "LoRA rank must be a positive integer, got 0"),
        ("gqa", dict(rank=-2), "LoRA rank must be a positive integer, got -2"),
        ("gqa", dict(rank=4, targets=("q", "qproj")), "unknown LoRA target 'qproj'"),
        ("classic", dict(rank=4, targets=("gate",)), "LoRA target 'gate' matches no layer of this classic model"),
        ("classic", dict(rank=4, targets=("q", "v")), "one matrix"),
        ("gqa", dict(rank=4, dropout=1.0), "dropout must be in"),
        ("gqa", dict(rank=4, alpha=0), "alpha must be positive"),
        # k_proj and v_proj are 32 -> 16 (2 of 4 heads): a rank above 16 adds parameters and no capacity
        ("gqa", dict(rank=17), r"LoRA rank 17 exceeds 16, the smallest min\(in, out\) of the targeted layers "
                               r"\(blocks\.0\.attn\.k_proj: 32 -> 16\)"),
        ("gqa", dict(rank=100_000, targets=("q",)), r"LoRA rank 100000 exceeds 32"),
    ],
)
def test_bad_lora_settings_are_one_clear_line(variant: str, cfg: dict, message: str) -> None:
    model = build_model(config_of(variant))
    with pytest.raises(TinyLMError, match=message) as error:
        apply_lora(model, LoraConfig(**cfg))
    assert "\n" not in str(error.value)
    assert not has_lora(model) and all(p.requires_grad for p in model.parameters())  # nothing was touched


def test_applying_twice_is_refused() -> None:
    model = build_model(modern_config("gqa"))
    apply_lora(model, LoraConfig(rank=2))
    with pytest.raises(TinyLMError, match="already has LoRA"):
        apply_lora(model, LoraConfig(rank=2))


def test_fast_decoder_computes_unmerged_adapters() -> None:
    """The fused decoding path falls back to calling each LoRALinear, so unmerged adapters decode correctly."""
    from tinylm.inference.fast_decode import FastDecoder

    torch.manual_seed(0)
    model = build_model(modern_config("qknorm")).eval()
    apply_lora(model, LoraConfig(rank=4, targets="all-linear"))
    with_random_adapters(model)
    idx = tokens(model)
    with torch.no_grad():
        fast = FastDecoder(model, batch_size=2).extend(idx, last_only=False)
    assert (fast - logits(model, idx)).abs().max().item() < 1e-5


def test_a_rank_up_to_the_narrowest_target_is_taken() -> None:
    model = build_model(modern_config("gqa"))
    assert apply_lora(model, LoraConfig(rank=16)) and model.blocks[0].attn.k_proj.lora_A.shape == (16, 32)
    assert apply_lora(build_model(modern_config("gqa")), LoraConfig(rank=32, targets=("q", "o")))
    # all-linear also adapts the router and the shared expert's 32 -> 1 gate: the projections set the limit
    assert apply_lora(build_model(modern_config("moe_shared")), LoraConfig(rank=16, targets="all-linear"))


def test_a_huge_rank_is_refused_before_any_adapter_is_allocated(tmp_path: Path, capsys: pytest.CaptureFixture[str],
                                                                monkeypatch: pytest.MonkeyPatch) -> None:
    """`--lora-rank 100000` on a 128-wide model built 973M adapter parameters before the OOM killer came."""
    def no_allocation(*args: object, **kwargs: object) -> None:
        raise AssertionError("an adapter was allocated")

    args = [*sft_args(tmp_path / "out"), "--max-steps", "1", "--lora-rank", "100000"]
    capsys.readouterr()  # the base model's own run, if this test made it
    monkeypatch.setattr(LoRALinear, "__init__", no_allocation)
    assert main(args) == 1
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "LoRA rank 100000 exceeds" in err[0], err


@pytest.mark.parametrize(("option", "flag"), [(dict(lora_alpha=16.0), "--lora-alpha"),
                                              (dict(lora_dropout=0.1), "--lora-dropout"),
                                              (dict(rslora=True), "--rslora"),
                                              (dict(lora_targets="q,v"), "--lora-targets")])
def test_a_lora_option_without_a_rank_is_said_not_ignored(option: dict, flag: str) -> None:
    with pytest.raises(TinyLMError, match=f"^{flag} has no effect without --lora-rank"):
        SFTConfig(base="x", **option)
    assert SFTConfig(base="x", lora_rank=2, **option).lora_config().rank == 2
