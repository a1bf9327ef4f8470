"""The classic GPT-2-style decoder: exact parameter count, hand-written attention, initialization."""

from __future__ import annotations

import math

import pytest
import torch

from model_variants import classic_config, modern_config
from tinylm.config import ModelConfig
from tinylm.models.classic import ClassicGPT
from tinylm.models.factory import build_model
from tinylm.presets import preset_config


def test_13m_preset_has_exactly_13_142_656_parameters() -> None:
    model = build_model(preset_config("13m", "classic"))
    assert isinstance(model, ClassicGPT)
    assert model.num_params() == 13_142_656
    # half of it is the 50304 x 128 token table, the other half the untied head
    assert model.token_embed.weight.numel() == 50304 * 128 == 6_438_912
    # and the seed's head bias, which the preset keeps explicitly (GPT-2 has none: the default is off)
    assert model.lm_head.bias is not None and model.lm_head.weight is not model.token_embed.weight
    assert model.config.head_bias and not classic_config().head_bias


@pytest.mark.parametrize("head_bias", [False, True])
def test_parameter_count_by_hand(head_bias: bool) -> None:
    V, T, C, L = 97, 32, 32, 2
    block = (2 * C) + (C * 3 * C) + (C * C + C) + (2 * C) + (C * 4 * C + 4 * C) + (4 * C * C + C)
    expected = V * C + T * C + L * block + 2 * C + C * V + (V if head_bias else 0)
    model = build_model(classic_config(head_bias=head_bias))
    assert model.num_params() == expected
    assert (model.lm_head.bias is not None) == head_bias


def test_handwritten_attention_equals_sdpa() -> None:
    torch.manual_seed(0)
    manual = build_model(classic_config(attn_impl="manual")).eval()
    fused = build_model(classic_config(attn_impl="sdpa")).eval()
    fused.load_state_dict(manual.state_dict())
    idx = torch.randint(0, 97, (3, 32))
    with torch.no_grad():
        torch.testing.assert_close(manual(idx)[0], fused(idx)[0], atol=1e-5, rtol=1e-5)
    valid = torch.ones(3, 32, dtype=torch.bool)
    valid[0, :7] = False
    with torch.no_grad():
        a = manual.forward_hidden(idx, valid=valid)
        b = fused.forward_hidden(idx, valid=valid)
    torch.testing.assert_close(a, b, atol=1e-5, rtol=1e-5)


def test_left_padding_with_positions_equals_unpadded() -> None:
    torch.manual_seed(1)
    model = build_model(classic_config()).eval()
    seq = torch.randint(0, 97, (1, 10))
    padded = torch.cat([torch.zeros(1, 4, dtype=torch.long), seq], 1)
    valid = torch.tensor([[False] * 4 + [True] * 10])
    positions = (valid.long().cumsum(1) - 1).clamp(min=0)[0]
    with torch.no_grad():
        got = model.forward_hidden(padded, positions=positions, valid=valid)[0, 4:]
        expected = model.forward_hidden(seq)[0]
    torch.testing.assert_close(got, expected, atol=1e-5, rtol=1e-5)


def test_init_scales_residual_projections() -> None:
    torch.manual_seed(0)
    model = build_model(classic_config(n_embed=256, n_head=4, n_blocks=8, vocab_size=2048))
    residual = 0.02 / math.sqrt(16)
    for name, p in model.named_parameters():
        if name.endswith("bias"):
            assert torch.all(p == 0), name
        elif name.startswith(("blocks.", "token_embed", "pos_embed", "lm_head")) and p.dim() == 2:
            expected = residual if name.endswith(("o_proj.weight", "proj.weight")) else 0.02
            assert p.std().item() == pytest.approx(expected, rel=0.05), name


def test_context_overflow_is_refused() -> None:
    model = build_model(classic_config())
    with pytest.raises(ValueError, match="exceeds context_length"):
        model(torch.zeros(1, 33, dtype=torch.long))


def test_modern_only_options_are_refused_for_classic() -> None:
    with pytest.raises(ValueError, match="invalid config: qk_norm=True: is a modern-only feature"):
        classic_config(qk_norm=True)


def test_configs_saved_before_head_bias_existed_keep_their_bias() -> None:
    saved = classic_config().to_dict()
    del saved["head_bias"]  # what a checkpoint written by the seed holds
    old = ModelConfig.from_dict(saved)
    assert old.head_bias and build_model(old).lm_head.bias is not None
    assert not ModelConfig.from_dict(classic_config().to_dict()).head_bias
    modern = {k: v for k, v in modern_config("gqa").to_dict().items() if k != "head_bias"}
    assert not ModelConfig.from_dict(modern).head_bias  # the modern head never had one
