"""mlp_type=relu2: the ungated ReLU^2 MLP, at SwiGLU's parameter count, computed as its formula says."""

from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F

from tinylm.errors import TinyLMError
from tinylm.inference.engine import Engine
from tinylm.inference.runners import runner_choice
from tinylm.interop.gguf_layout import gguf_architecture
from tinylm.interop.hf import hf_architecture
from tinylm.models.factory import build_model
from tinylm.presets import preset_config


@pytest.mark.parametrize("preset", ["tiny", "small"])
def test_relu2_has_the_parameters_and_matmul_flops_of_swiglu(preset: str) -> None:
    swiglu, relu2 = (build_model(preset_config(preset, mlp_type=kind)) for kind in ("swiglu", "relu2"))
    assert relu2.config.mlp_width == swiglu.config.mlp_width * 3 // 2
    assert relu2.num_params() == swiglu.num_params()
    assert relu2.flops_per_token() == swiglu.flops_per_token()


def test_a_block_computes_down_of_relu_up_squared() -> None:
    """The MLP against its formula written here with plain matmuls, and the whole model against a SwiGLU one
    whose other weights are the same: only the MLP differs."""
    torch.manual_seed(0)
    config = preset_config("tiny", n_blocks=2, vocab_size=64, context_length=16, mlp_type="relu2")
    model = build_model(config).eval()
    mlp = model.blocks[0].mlp
    x = torch.randn(3, 5, config.n_embed)
    expected = (x @ mlp.up.weight.T).clamp(min=0).pow(2) @ mlp.down.weight.T
    torch.testing.assert_close(mlp(x), expected, rtol=1e-5, atol=1e-6)
    assert not hasattr(mlp, "gate")

    idx = torch.randint(0, 64, (2, 16))
    logits, _ = model(idx)
    # the same network by hand: attention from the model's own modules, the MLP from the formula
    h = model.token_embed(idx)
    cos, sin = model.rope(torch.arange(16), h.dtype, upto=16)
    for block in model.blocks:
        h = h + block.attn(block.attn_norm(h), cos, sin, None, True, None, block.index)
        m = block.mlp_norm(h)
        h = h + F.relu(m @ block.mlp.up.weight.T).square() @ block.mlp.down.weight.T
    torch.testing.assert_close(model.lm_head(model.norm(h)), logits, rtol=1e-4, atol=1e-5)


def test_relu2_trains_decodes_on_the_fast_path_and_is_refused_by_the_exports() -> None:
    torch.manual_seed(0)
    model = build_model(preset_config("tiny", n_blocks=1, vocab_size=64, context_length=32, mlp_type="relu2"))
    opt = torch.optim.AdamW(model.parameters(), lr=3e-3)
    idx = torch.arange(32).remainder(8)[None].repeat(4, 1)  # a period-8 sequence: learnable in a few steps
    first = None
    for _ in range(30):
        _, loss = model(idx[:, :-1], idx[:, 1:], return_logits=False)
        opt.zero_grad()
        loss.backward()
        opt.step()
        first = loss.item() if first is None else first
    assert loss.item() < first / 2
    model.eval()
    _, why = runner_choice(model)
    assert why.startswith("the fast decoder")  # it computes ReLU^2 itself (its logits: tests/test_fast_decode.py)
    prompt = torch.tensor([[0, 1, 2, 3]])
    cached = Engine(model).generate(prompt.tolist(), max_new_tokens=6)
    uncached = Engine(model, use_cache=False).generate(prompt.tolist(), max_new_tokens=6)
    assert cached == uncached
    assert cached[0][:4] == [4, 5, 6, 7]  # greedy continues the sequence it learned
    for export in (hf_architecture, gguf_architecture):
        with pytest.raises(TinyLMError, match="mlp_type=relu2"):
            export(model.config)


def test_relu2_is_modern_and_dense_only() -> None:
    with pytest.raises(ValueError, match="mlp_type"):
        preset_config("tiny", arch="classic", mlp_type="relu2")
    with pytest.raises(ValueError, match="mlp_type"):
        preset_config("tiny", mlp_type="relu2", n_experts=4)
    with pytest.raises(ValueError, match="mlp_type"):
        preset_config("tiny", mlp_type="gelu")
