"""tinylm's weights under llama.cpp's tensor names, in the layout and number type each GGUF tensor needs.

Names: `{i}` is a block index, as in interop/names.py. Shapes need no transposes: a GGUF tensor lists
its dimensions innermost first, so a PyTorch [out, in] matrix written as it is is llama.cpp's
{in, out}, the layout its matmuls take.

The llama graph applies RoPE to interleaved pairs (dimension 2j with 2j+1); tinylm, like
transformers, rotates halves (j with j + d/2). Permuting the rows of each head of W_q and W_k from
[first half; second half] to [j0, j0', j1, j1', ...] makes the two compute the same scores, which is
the permutation llama.cpp's own converter applies. qwen3's graph rotates halves, so it needs none.

Quantization: norms and biases (1-D) stay float32, as llama.cpp keeps them; every matrix takes the
chosen type. A matrix whose rows are not a whole number of quantization blocks (32 numbers) cannot
be q8_0/q4_0 and is written as f16 instead: `fallbacks` lists them.
"""

from __future__ import annotations

import re

import numpy as np
import torch

from tinylm.config import ModelConfig
from tinylm.errors import TinyLMError
from tinylm.models.modern.rope_scaling import RopeScaling, inverse_frequencies, plain_inverse_frequencies

QUANTS = ("f32", "f16", "bf16", "q8_0", "q4_0")

_LLAMA = {
    "token_embed.weight": "token_embd.weight",
    "norm.weight": "output_norm.weight",
    "lm_head.weight": "output.weight",
    "blocks.{i}.attn_norm.weight": "blk.{i}.attn_norm.weight",
    "blocks.{i}.attn.q_proj.weight": "blk.{i}.attn_q.weight",
    "blocks.{i}.attn.k_proj.weight": "blk.{i}.attn_k.weight",
    "blocks.{i}.attn.v_proj.weight": "blk.{i}.attn_v.weight",
    "blocks.{i}.attn.o_proj.weight": "blk.{i}.attn_output.weight",
    "blocks.{i}.mlp_norm.weight": "blk.{i}.ffn_norm.weight",
    "blocks.{i}.mlp.gate.weight": "blk.{i}.ffn_gate.weight",
    "blocks.{i}.mlp.up.weight": "blk.{i}.ffn_up.weight",
    "blocks.{i}.mlp.down.weight": "blk.{i}.ffn_down.weight",
}
_QWEN3 = {
    **_LLAMA,
    "blocks.{i}.attn.q_norm.weight": "blk.{i}.attn_q_norm.weight",
    "blocks.{i}.attn.k_norm.weight": "blk.{i}.attn_k_norm.weight",
}
_GPT2 = {
    "token_embed.weight": "token_embd.weight",
    "pos_embed.weight": "position_embd.weight",
    "ln_f.weight": "output_norm.weight",
    "ln_f.bias": "output_norm.bias",
    "lm_head.weight": "output.weight",
    **{f"blocks.{{i}}.{ours}.{p}": f"blk.{{i}}.{theirs}.{p}"
       for ours, theirs in (("ln1", "attn_norm"), ("ln2", "ffn_norm"), ("attn.qkv", "attn_qkv"),
                            ("attn.o_proj", "attn_output"), ("mlp.hidden", "ffn_up"), ("mlp.proj", "ffn_down"))
       for p in ("weight", "bias")},
}
TENSOR_NAMES: dict[str, dict[str, str]] = {"llama": _LLAMA, "qwen3": _QWEN3, "gpt2": _GPT2}


def interleave_rope_rows(weight: torch.Tensor, n_heads: int) -> torch.Tensor:
    """W_q or W_k [n_heads * d, in] with each head's rows reordered from halves to interleaved pairs."""
    rows, cols = weight.shape
    d = rows // n_heads
    return weight.reshape(n_heads, 2, d // 2, cols).transpose(1, 2).reshape(rows, cols)


def gguf_tensors(weights: dict[str, torch.Tensor], config: ModelConfig, architecture: str
                 ) -> dict[str, torch.Tensor]:
    """Every weight under its GGUF name, float32, permuted where llama's RoPE needs it; a tied head written once.

    llama.cpp's gpt2 graph has attention biases and no head bias: biases tinylm does not have are
    written as the zeros they are, and a head bias is refused unless it is zero.
    """
    table = [(re.compile("^" + re.escape(ours).replace(r"\{i\}", r"(?P<i>\d+)") + "$"), theirs)
             for ours, theirs in TENSOR_NAMES[architecture].items()]
    weights = dict(weights)
    if architecture == "gpt2":
        head_bias = weights.pop("lm_head.bias", None)
        if head_bias is not None and head_bias.abs().max().item() != 0.0:
            raise TinyLMError("cannot export to GGUF: lm_head bias is not zero (head_bias=true): llama.cpp's gpt2 "
                              "graph has no output bias")
        for i in range(config.n_blocks):
            weights.setdefault(f"blocks.{i}.attn.qkv.bias", torch.zeros(3 * config.n_embed))
    out: dict[str, torch.Tensor] = {}
    for name, tensor in weights.items():
        tensor = tensor.detach().to(torch.float32)
        if architecture == "llama" and name.endswith(("attn.q_proj.weight", "attn.k_proj.weight")):
            heads = config.n_head if name.endswith("q_proj.weight") else config.kv_heads
            tensor = interleave_rope_rows(tensor, heads)
        out[_gguf_name(name, table, architecture)] = tensor.contiguous()
    if config.rope_scaling == "llama3":
        out["rope_freqs.weight"] = rope_frequency_factors(config)
    return out


def rope_frequency_factors(config: ModelConfig) -> torch.Tensor:
    """Llama 3.1's rule as llama.cpp reads it: one float32 per rotary pair, the number its plain frequency is
    divided by (1 for the kept fast pairs, the factor for the interpolated slow ones, between in the band)."""
    scaling = RopeScaling.of(config)
    plain = plain_inverse_frequencies(config.dim_per_head, config.rope_theta).double()
    scaled, _ = inverse_frequencies(scaling, config.dim_per_head, config.context_length)
    return (plain / scaled.double()).to(torch.float32)


def _gguf_name(name: str, table: list[tuple[re.Pattern[str], str]], architecture: str) -> str:
    """The GGUF name of one tinylm weight; a weight without one is an error, never silently dropped."""
    for pattern, target in table:
        match = pattern.match(name)
        if match:
            return target.format(**match.groupdict())
    raise TinyLMError(f"cannot export to GGUF: unexpected weight {name!r}, no llama.cpp {architecture} counterpart")


def encode_tensor(tensor: torch.Tensor, quant: str) -> tuple[np.ndarray, object, bool]:
    """(data, GGML type, fell back to f16) for one tensor: 1-D stays f32, matrices take `quant`."""
    from gguf import GGML_QUANT_SIZES, quants
    from gguf import GGMLQuantizationType as T

    array = tensor.numpy()
    if array.ndim == 1 or quant == "f32":
        return array, T.F32, False
    qtype = {"f16": T.F16, "bf16": T.BF16, "q8_0": T.Q8_0, "q4_0": T.Q4_0}[quant]
    fell_back = False
    if quant in ("q8_0", "q4_0") and array.shape[-1] % GGML_QUANT_SIZES[qtype][0] != 0:
        qtype, fell_back = T.F16, True
    return quants.quantize(array, qtype), qtype, fell_back
