"""Weight-only int8: the rounding bound, the memory saving, and logits close to float32."""

from __future__ import annotations

import copy

import pytest
import torch

from model_variants import all_configs
from tinylm.inference.engine import Engine
from tinylm.inference.int8 import HAS_PACKED_KERNEL, Int8Linear, linear_weight_bytes, quantize_int8, quantize_rows
from tinylm.inference.sampling import GREEDY
from tinylm.models.factory import build_model
from tinylm.presets import preset_config


def test_rounding_error_is_at_most_half_a_step_per_channel() -> None:
    weight = torch.randn(64, 48, generator=torch.Generator().manual_seed(0)) * torch.logspace(-3, 1, 64)[:, None]
    q, scale = quantize_rows(weight)
    assert q.dtype == torch.int8 and scale.shape == (64,)
    assert q.abs().amax(dim=1).eq(127).all()  # every row uses the full range
    error = (weight - q.float() * scale[:, None]).abs()
    assert (error <= scale[:, None] / 2 + 1e-7).all()


def test_int8_linear_computes_the_scaled_int8_product() -> None:
    linear = torch.nn.Linear(48, 32, bias=True)
    layer = Int8Linear.from_linear(linear)
    x = torch.randn(5, 48)
    torch.testing.assert_close(layer(x), x @ layer.dequantized().T + linear.bias, rtol=1e-5, atol=1e-5)


@pytest.mark.skipif(not HAS_PACKED_KERNEL, reason="this torch has no _weight_int8pack_mm")
@pytest.mark.parametrize("bias", [False, True])
def test_half_precision_activations_take_torchs_int8_kernel_with_the_same_product(
        bias: bool, monkeypatch: pytest.MonkeyPatch) -> None:
    """bf16 x goes through torch._weight_int8pack_mm: the product of x with the dequantized rows, to bf16 rounding."""
    linear = torch.nn.Linear(96, 40, bias=bias)
    layer = Int8Linear.from_linear(linear).to(torch.bfloat16)
    assert layer.qweight.dtype == torch.int8 and layer.scale.dtype == torch.bfloat16
    x = torch.randn(2, 3, 96, generator=torch.Generator().manual_seed(0)).bfloat16()
    calls = []
    kernel = torch._weight_int8pack_mm
    monkeypatch.setattr(torch, "_weight_int8pack_mm", lambda *a: calls.append(a[0].shape) or kernel(*a))
    y = layer(x)
    assert calls == [(6, 96)] and y.shape == (2, 3, 40) and y.dtype == torch.bfloat16
    expected = x.double() @ (layer.qweight.double() * layer.scale.double()[:, None]).T
    if bias:
        expected = expected + layer.bias.double()
    torch.testing.assert_close(y.double(), expected, rtol=2e-2, atol=2e-2)
    assert layer(x.float()).dtype == torch.float32 and len(calls) == 1  # float32 x: dequantized on the fly


@pytest.mark.parametrize("arch", ["modern", "classic"])
def test_int8_weights_take_under_0_3x_and_logits_stay_close(arch: str) -> None:
    torch.manual_seed(0)
    model = build_model(preset_config("tiny", arch=arch, n_blocks=2)).eval()
    quantized = quantize_int8(copy.deepcopy(model))
    assert linear_weight_bytes(quantized) <= 0.3 * linear_weight_bytes(model)
    assert sum(isinstance(m, Int8Linear) for m in quantized.modules()) > 0
    assert not any(type(m) is torch.nn.Linear and m.weight is not quantized.token_embed.weight
                   for m in quantized.modules())
    idx = torch.randint(0, 4096, (2, 48), generator=torch.Generator().manual_seed(1))
    with torch.inference_mode():
        reference, _ = model(idx)
        logits, _ = quantized(idx)
    assert (logits - reference).abs().max() < 0.02 * reference.abs().max()
    assert (logits.argmax(-1) == reference.argmax(-1)).float().mean() > 0.95


@pytest.mark.parametrize("name", ["gqa", "gated", "classic"])
def test_int8_models_generate_through_every_runner(name: str) -> None:
    torch.manual_seed(0)
    model = quantize_int8(build_model(all_configs()[name].replace(init_std=0.4)).eval())
    prompts = [[1, 2, 3], [4, 5]]
    fast = Engine(model).generate(prompts, 20, GREEDY)
    assert fast == Engine(model, use_cache=False).generate(prompts, 20, GREEDY)


def test_an_int8_model_with_bf16_activations_stays_close_and_decodes_alike_on_every_runner() -> None:
    """What `--int8` decodes with on a bf16 CPU: int8 rows, bf16 everything else, torch's int8 kernel."""
    torch.manual_seed(0)
    model = build_model(preset_config("tiny", n_blocks=2)).eval()
    quantized = quantize_int8(copy.deepcopy(model)).to(torch.bfloat16)
    idx = torch.randint(0, 4096, (2, 48), generator=torch.Generator().manual_seed(1))
    with torch.inference_mode():
        reference, _ = model(idx)
        logits, _ = quantized(idx)
    assert (logits.float() - reference).abs().max() < 0.04 * reference.abs().max()
    assert (logits.argmax(-1) == reference.argmax(-1)).float().mean() > 0.9
    prompts = [[1, 2, 3], [4, 5]]
    fast = Engine(quantized).generate(prompts, 12, GREEDY)  # the fused q/k/v and gate/up int8 rows
    assert fast == Engine(quantized, use_cache=False).generate(prompts, 12, GREEDY)
