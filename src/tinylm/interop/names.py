"""Weight names: tinylm's parameter names <-> each `transformers` architecture's, both directions.

A table is a list of (ours, theirs, transposed) rows; `{i}` stands for a block index and `{j}` for
an expert index, so one row covers every layer. `transposed` marks GPT-2's Conv1D layers, which
store their weight as [in, out] where `nn.Linear` stores [out, in]. The same table renames in both
directions, so export and import cannot drift apart.
"""

from __future__ import annotations

import re

import torch

from tinylm.errors import TinyLMError

Row = tuple[str, str, bool]

_MODERN_TOP: list[Row] = [
    ("token_embed.weight", "model.embed_tokens.weight", False),
    ("norm.weight", "model.norm.weight", False),
    ("lm_head.weight", "lm_head.weight", False),
    ("blocks.{i}.attn_norm.weight", "model.layers.{i}.input_layernorm.weight", False),
    ("blocks.{i}.mlp_norm.weight", "model.layers.{i}.post_attention_layernorm.weight", False),
]
_ATTENTION: list[Row] = [
    (f"blocks.{{i}}.attn.{name}.weight", f"model.layers.{{i}}.self_attn.{name}.weight", False)
    for name in ("q_proj", "k_proj", "v_proj", "o_proj", "q_norm", "k_norm")
]
_MLA: list[Row] = [
    (f"blocks.{{i}}.attn.{ours}.weight", f"model.layers.{{i}}.self_attn.{theirs}.weight", False)
    for ours, theirs in (
        ("q_proj", "q_proj"), ("q_a_proj", "q_a_proj"), ("q_a_norm", "q_a_layernorm"), ("q_b_proj", "q_b_proj"),
        ("kv_a_proj", "kv_a_proj_with_mqa"), ("kv_a_norm", "kv_a_layernorm"), ("kv_b_proj", "kv_b_proj"),
        ("o_proj", "o_proj"),
    )
]
_SWIGLU = (("gate", "gate_proj"), ("up", "up_proj"), ("down", "down_proj"))
_DENSE_MLP: list[Row] = [
    (f"blocks.{{i}}.mlp.{ours}.weight", f"model.layers.{{i}}.mlp.{theirs}.weight", False) for ours, theirs in _SWIGLU
]
_QWEN_MOE: list[Row] = [
    ("blocks.{i}.mlp.router.weight", "model.layers.{i}.mlp.gate.weight", False),
    *[(f"blocks.{{i}}.mlp.experts.{{j}}.{ours}.weight", f"model.layers.{{i}}.mlp.experts.{{j}}.{theirs}.weight", False)
      for ours, theirs in _SWIGLU],
    *[(f"blocks.{{i}}.mlp.shared.{ours}.weight", f"model.layers.{{i}}.mlp.shared_expert.{theirs}.weight", False)
      for ours, theirs in _SWIGLU],
    ("blocks.{i}.mlp.shared_gate.weight", "model.layers.{i}.mlp.shared_expert_gate.weight", False),
]
# Mixtral's on-disk names: w1 = gate, w3 = up, w2 = down
_MIXTRAL_MOE: list[Row] = [
    ("blocks.{i}.mlp.router.weight", "model.layers.{i}.block_sparse_moe.gate.weight", False),
    *[(f"blocks.{{i}}.mlp.experts.{{j}}.{ours}.weight",
       f"model.layers.{{i}}.block_sparse_moe.experts.{{j}}.{theirs}.weight", False)
      for ours, theirs in (("gate", "w1"), ("up", "w3"), ("down", "w2"))],
]
_GPT2: list[Row] = [
    ("token_embed.weight", "transformer.wte.weight", False),
    ("pos_embed.weight", "transformer.wpe.weight", False),
    ("ln_f.weight", "transformer.ln_f.weight", False),
    ("ln_f.bias", "transformer.ln_f.bias", False),
    ("lm_head.weight", "lm_head.weight", False),
    *[(f"blocks.{{i}}.{ours}.{p}", f"transformer.h.{{i}}.{theirs}.{p}", False)
      for ours, theirs in (("ln1", "ln_1"), ("ln2", "ln_2")) for p in ("weight", "bias")],
    *[(f"blocks.{{i}}.{ours}.{p}", f"transformer.h.{{i}}.{theirs}.{p}", p == "weight")
      for ours, theirs in (("attn.qkv", "attn.c_attn"), ("attn.o_proj", "attn.c_proj"),
                           ("mlp.hidden", "mlp.c_fc"), ("mlp.proj", "mlp.c_proj"))
      for p in ("weight", "bias")],
]

TABLES: dict[str, list[Row]] = {
    "LlamaForCausalLM": _MODERN_TOP + _ATTENTION + _DENSE_MLP,
    "MistralForCausalLM": _MODERN_TOP + _ATTENTION + _DENSE_MLP,
    "Qwen3ForCausalLM": _MODERN_TOP + _ATTENTION + _DENSE_MLP,
    "Qwen2MoeForCausalLM": _MODERN_TOP + _ATTENTION + _QWEN_MOE,
    "Qwen3MoeForCausalLM": _MODERN_TOP + _ATTENTION + _QWEN_MOE,
    "MixtralForCausalLM": _MODERN_TOP + _ATTENTION + _MIXTRAL_MOE,
    "DeepseekV3ForCausalLM": _MODERN_TOP + _MLA + _DENSE_MLP,
    "GPT2LMHeadModel": _GPT2,
}


def _pattern(template: str) -> re.Pattern[str]:
    escaped = re.escape(template).replace(r"\{i\}", r"(?P<i>\d+)").replace(r"\{j\}", r"(?P<j>\d+)")
    return re.compile(f"^{escaped}$")


def rename(weights: dict[str, torch.Tensor], architecture: str, to_hf: bool) -> dict[str, torch.Tensor]:
    """Every tensor under the other side's name (transposed where GPT-2 stores [in, out]).

    A name the table does not know is an error, never silently dropped: a dropped weight would load
    as a random one on the other side.
    """
    rows = [(_pattern(src), dst, t) for ours, theirs, t in TABLES[architecture]
            for src, dst in [(ours, theirs) if to_hf else (theirs, ours)]]
    out: dict[str, torch.Tensor] = {}
    for name, tensor in weights.items():
        for pattern, target, transposed in rows:
            match = pattern.match(name)
            if match:
                out[target.format(**match.groupdict())] = tensor.t().contiguous() if transposed else tensor
                break
        else:
            side = "tinylm" if to_hf else architecture
            raise TinyLMError(f"unexpected weight {name!r}: no {architecture} counterpart for this {side} tensor")
    return out
