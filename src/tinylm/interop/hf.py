"""The mapping between tinylm models and Hugging Face `transformers` models: configs and weight names.

Only exact correspondences live here: a tinylm model mapped to `transformers` computes the same
logits (tests/test_hf_parity.py checks 1e-5 in float32). Modern MHA/GQA/MQA models are
`LlamaForCausalLM`; with QK-norm they are `Qwen3ForCausalLM`, whose attention normalizes each query
and key head before RoPE exactly as ours does. Both pair RoPE dimension i with i + head_dim/2
("rotate half"), as `models/modern/rope.py` does.

`transformers` is imported lazily: it is a dev/export dependency, not needed to train.
"""

from __future__ import annotations

from typing import Any

import torch
from torch import nn

from tinylm.config import ModelConfig
from tinylm.errors import TinyLMError

# our parameter names -> Hugging Face names, per block (Llama and Qwen3 share them)
_BLOCK_NAMES = {
    "attn_norm.weight": "input_layernorm.weight",
    "attn.q_proj.weight": "self_attn.q_proj.weight",
    "attn.k_proj.weight": "self_attn.k_proj.weight",
    "attn.v_proj.weight": "self_attn.v_proj.weight",
    "attn.o_proj.weight": "self_attn.o_proj.weight",
    "attn.q_norm.weight": "self_attn.q_norm.weight",
    "attn.k_norm.weight": "self_attn.k_norm.weight",
    "mlp_norm.weight": "post_attention_layernorm.weight",
    "mlp.gate.weight": "mlp.gate_proj.weight",
    "mlp.up.weight": "mlp.up_proj.weight",
    "mlp.down.weight": "mlp.down_proj.weight",
}
_TOP_NAMES = {"token_embed.weight": "model.embed_tokens.weight", "norm.weight": "model.norm.weight",
              "lm_head.weight": "lm_head.weight"}


def hf_architecture(config: ModelConfig) -> str:
    """The `transformers` class that computes exactly what this config computes, or a clear refusal."""
    if config.arch != "modern":
        raise TinyLMError("only modern models map to Llama/Qwen3 (the classic one maps to GPT-2 on export)")
    unsupported = {
        "attention=mla": config.attention == "mla",
        "mixture of experts": config.is_moe,
        "attn_output_gate": config.attn_output_gate,
        "sliding_window": config.sliding_window is not None,
    }
    named = [feature for feature, present in unsupported.items() if present]
    if named:
        raise TinyLMError(f"no exact Llama/Qwen3 counterpart for: {', '.join(named)}")
    return "Qwen3ForCausalLM" if config.qk_norm else "LlamaForCausalLM"


def hf_config(config: ModelConfig, **token_ids: Any):
    """A `transformers` config with the same shapes, norms and RoPE as `config`."""
    import transformers

    architecture = hf_architecture(config)
    common = dict(
        vocab_size=config.vocab_size,
        hidden_size=config.n_embed,
        intermediate_size=config.mlp_width,
        num_hidden_layers=config.n_blocks,
        num_attention_heads=config.n_head,
        num_key_value_heads=config.kv_heads,
        head_dim=config.dim_per_head,
        hidden_act="silu",
        max_position_embeddings=config.context_length,
        initializer_range=config.init_std,
        rms_norm_eps=config.norm_eps,
        tie_word_embeddings=config.tie_embeddings,
        rope_parameters={"rope_type": "default", "rope_theta": float(config.rope_theta)},
        attention_bias=False,
        attention_dropout=0.0,
        architectures=[architecture],
        **token_ids,
    )
    if architecture == "Qwen3ForCausalLM":
        return transformers.Qwen3Config(use_sliding_window=False, **common)
    return transformers.LlamaConfig(mlp_bias=False, **common)


def hf_state_dict(model: nn.Module) -> dict[str, torch.Tensor]:
    """Our weights under Hugging Face names (a tied head is written once, as the embedding)."""
    hf_architecture(model.config)
    out: dict[str, torch.Tensor] = {}
    for name, tensor in model.state_dict().items():
        if name.startswith("blocks."):
            _, index, rest = name.split(".", 2)
            out[f"model.layers.{index}.{_BLOCK_NAMES[rest]}"] = tensor
        elif name == "lm_head.weight" and model.config.tie_embeddings:
            continue
        else:
            out[_TOP_NAMES[name]] = tensor
    return out


def to_hf_model(model: nn.Module, **token_ids: Any) -> nn.Module:
    """A `transformers` CausalLM holding copies of our weights, in eval mode, in float32."""
    import transformers

    config = hf_config(model.config, **token_ids)
    hf_model = getattr(transformers, config.architectures[0])(config)
    result = hf_model.load_state_dict(hf_state_dict(model), strict=False)
    missing = [n for n in result.missing_keys if not (n == "lm_head.weight" and model.config.tie_embeddings)]
    if missing or result.unexpected_keys:
        raise RuntimeError(f"weight mapping mismatch: missing {missing[:5]}, unexpected {result.unexpected_keys[:5]}")
    return hf_model.float().eval()


def config_from_hf(hf: Any) -> ModelConfig:
    """The tinylm config of a Llama or Qwen3 `transformers` config, refusing what we cannot represent."""
    architecture = (getattr(hf, "architectures", None) or [type(hf).__name__.replace("Config", "ForCausalLM")])[0]
    if hf.model_type not in ("llama", "qwen3"):
        raise TinyLMError(f"unsupported architecture {architecture!r} (model_type {hf.model_type!r})")
    rope = getattr(hf, "rope_parameters", None) or {}
    if rope.get("rope_type", "default") != "default":
        raise TinyLMError(f"unsupported rope scaling {rope.get('rope_type')!r}: only the default RoPE maps exactly")
    if getattr(hf, "attention_bias", False) or getattr(hf, "mlp_bias", False):
        raise TinyLMError("unsupported: attention/MLP biases (tinylm's modern model has none)")
    if hf.hidden_act != "silu":
        raise TinyLMError(f"unsupported hidden_act {hf.hidden_act!r}: tinylm's SwiGLU uses silu")
    if getattr(hf, "use_sliding_window", False):
        raise TinyLMError("unsupported: sliding-window Qwen3 layers")
    return ModelConfig(
        arch="modern",
        vocab_size=hf.vocab_size,
        context_length=hf.max_position_embeddings,
        n_embed=hf.hidden_size,
        n_head=hf.num_attention_heads,
        n_kv_head=hf.num_key_value_heads,
        n_blocks=hf.num_hidden_layers,
        head_dim=getattr(hf, "head_dim", None) or hf.hidden_size // hf.num_attention_heads,
        mlp_hidden=hf.intermediate_size,
        norm_eps=hf.rms_norm_eps,
        rope_theta=float(rope.get("rope_theta", getattr(hf, "rope_theta", 10000.0))),
        tie_embeddings=bool(hf.tie_word_embeddings),
        qk_norm=hf.model_type == "qwen3",
        init_std=getattr(hf, "initializer_range", 0.02),
    )


def state_dict_from_hf(hf_state: dict[str, torch.Tensor], config: ModelConfig) -> dict[str, torch.Tensor]:
    """Hugging Face weights renamed to ours; the inverse of `hf_state_dict`."""
    block_names = {hf_name: ours for ours, hf_name in _BLOCK_NAMES.items()}
    top_names = {hf_name: ours for ours, hf_name in _TOP_NAMES.items()}
    out: dict[str, torch.Tensor] = {}
    for name, tensor in hf_state.items():
        if name.startswith("model.layers."):
            _, _, index, rest = name.split(".", 3)
            if rest not in block_names:
                raise TinyLMError(f"unexpected weight {name!r} for this architecture")
            out[f"blocks.{index}.{block_names[rest]}"] = tensor
        elif name in top_names:
            out[top_names[name]] = tensor
        elif name.endswith("rotary_emb.inv_freq"):
            continue
        else:
            raise TinyLMError(f"unexpected weight {name!r} for this architecture")
    if config.tie_embeddings:
        out.pop("lm_head.weight", None)
        out["lm_head.weight"] = out["token_embed.weight"]
    return out
