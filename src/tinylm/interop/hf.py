"""The mapping between tinylm models and Hugging Face `transformers` models: architectures, configs, weights.

Only exact correspondences live here: a tinylm model mapped to `transformers` computes the same
logits (tests/test_hf_parity.py checks 1e-5 in float32). Which class computes what ours does:

    modern, dense                 LlamaForCausalLM        (+ sliding window: MistralForCausalLM)
    modern, dense, QK-norm        Qwen3ForCausalLM        (sliding window in every layer allowed)
    MoE + gated shared expert     Qwen2MoeForCausalLM     (sigmoid-gated shared expert, softmax top-k)
    MoE, QK-norm, no shared       Qwen3MoeForCausalLM
    MoE, no QK-norm, no shared    MixtralForCausalLM      (always renormalizes the top-k weights)
    MLA, dense MLP                DeepseekV3ForCausalLM   (rotate-half RoPE: rope_interleave false)
    classic                       GPT2LMHeadModel         (relu or gelu_new MLP, Conv1D weights [in, out])

All of them pair RoPE dimension i with i + d/2 ("rotate half") and compute cos/sin in float32, as
`models/modern/rope.py` does; their RMSNorm casts back to the input dtype before the weight
multiplies, as ours does. Anything without an exact counterpart is refused naming the feature.

Configs are plain dicts (the contents of `config.json`), so exporting needs no `transformers`;
`transformers` is imported lazily, only to build live models. Reading a `transformers` config back
into ours, refusing what does not map, is interop/hf_config_reader.py.
"""

from __future__ import annotations

import json
import tempfile
from pathlib import Path
from typing import Any

import torch
from torch import nn

from tinylm.checkpoint.save import save_safetensors
from tinylm.config import ModelConfig
from tinylm.errors import TinyLMError
from tinylm.interop.names import rename

MODEL_TYPES = {
    "LlamaForCausalLM": "llama", "MistralForCausalLM": "mistral", "Qwen3ForCausalLM": "qwen3",
    "Qwen2MoeForCausalLM": "qwen2_moe", "Qwen3MoeForCausalLM": "qwen3_moe", "MixtralForCausalLM": "mixtral",
    "DeepseekV3ForCausalLM": "deepseek_v3", "GPT2LMHeadModel": "gpt2",
}
HF_ACTIVATION = {"relu": "relu", "gelu": "gelu_new"}  # GPT-2's name for the tanh-approximated GELU
ARCHITECTURES = {model_type: arch for arch, model_type in MODEL_TYPES.items()}
DEEPSEEK_LATENT_NORM_EPS = 1e-6  # DeepseekV3's q_a/kv_a layernorms ignore rms_norm_eps and use this


def _refuse(feature: str, why: str) -> TinyLMError:
    return TinyLMError(f"no exact transformers counterpart for {feature}: {why}")


def hf_architecture(config: ModelConfig) -> str:
    """The `transformers` class that computes exactly what this config computes, or a refusal naming the feature."""
    if config.logit_softcap is not None:
        raise _refuse(f"logit_softcap={config.logit_softcap:g}", "the GPT-2, Llama and Qwen decoders do not cap "
                      "their logits (Gemma 2's does, with its own blocks)")
    if config.arch == "classic":
        return "GPT2LMHeadModel"
    if config.attn_output_gate:
        raise _refuse("attn_output_gate", "no transformers decoder gates attention heads with sigmoid(W_g x)")
    if config.mlp_type == "relu2":
        raise _refuse("mlp_type=relu2", "the Llama and Qwen decoders' MLP is gated (SwiGLU)")
    if config.attention == "mla":
        if config.is_moe:
            raise _refuse("mixture of experts with MLA", "DeepseekV3 routes with sigmoid scores and group-limited "
                          "top-k, tinylm with a softmax")
        if config.sliding_window is not None:
            raise _refuse("sliding_window with MLA", "DeepseekV3 attends to the full context")
        if config.norm_eps != DEEPSEEK_LATENT_NORM_EPS:
            raise _refuse(f"MLA with norm_eps={config.norm_eps}", "DeepseekV3's latent norms always use eps 1e-6 "
                          "(train with norm_eps=1e-6 to export)")
        return "DeepseekV3ForCausalLM"
    if config.is_moe:
        if config.n_shared_experts:
            if not config.moe_shared_expert_gate:
                raise _refuse("an ungated shared expert", "Qwen2-MoE always scales its shared expert by a sigmoid "
                              "gate (set moe_shared_expert_gate=true)")
            if config.qk_norm:
                raise _refuse("qk_norm with a shared expert", "Qwen2-MoE has no QK-norm")
            if config.sliding_window is not None:
                raise _refuse("sliding_window with a shared expert", "Qwen2-MoE windows alternate layers only")
            return "Qwen2MoeForCausalLM"
        if config.qk_norm:
            return "Qwen3MoeForCausalLM"
        if not config.moe_norm_topk_prob:
            raise _refuse("moe_norm_topk_prob=false without qk_norm", "Mixtral always renormalizes the top-k weights")
        return "MixtralForCausalLM"
    if config.qk_norm:
        return "Qwen3ForCausalLM"
    return "MistralForCausalLM" if config.sliding_window is not None else "LlamaForCausalLM"


# ---- configs -----------------------------------------------------------------------------------
# a transformers rope parameter -> the tinylm field it holds, per rule: the export writes and the import reads
# (hf_config_reader.py) this one table
ROPE_KEYS: dict[str, dict[str, str]] = {
    "linear": {"factor": "rope_factor"},
    "dynamic": {"factor": "rope_factor"},
    "yarn": {"factor": "rope_factor", "original_max_position_embeddings": "rope_original_context",
             "beta_fast": "yarn_beta_fast", "beta_slow": "yarn_beta_slow", "attention_factor": "yarn_attention_factor"},
    "llama3": {"factor": "rope_factor", "original_max_position_embeddings": "rope_original_context",
               "low_freq_factor": "llama3_low_freq_factor", "high_freq_factor": "llama3_high_freq_factor"},
}


def _rope(config: ModelConfig) -> dict[str, Any]:
    """RoPE and its scaling rule as transformers reads them (`modeling_rope_utils`'s field names).

    Both spellings: rope_parameters for transformers >= 5, rope_theta / rope_scaling for older readers and
    other tools (vLLM, llama.cpp's converter). Dynamic NTK reads max_position_embeddings as the original
    context, the length past which it starts to scale (`_max_positions`).
    """
    theta = float(config.rope_theta)
    rule = config.rope_scaling
    parameters: dict[str, Any] = {"rope_type": "default" if rule == "none" else rule, "rope_theta": theta}
    for key, name in ROPE_KEYS.get(rule, {}).items():
        value = config.rope_base_context if name == "rope_original_context" else getattr(config, name)
        if value is not None:  # an unset YaRN temperature: transformers derives it from the factor, as tinylm does
            parameters[key] = float(value) if key == "factor" else value
    if rule == "yarn":
        parameters["truncate"] = True  # the ramp's ends rounded to whole dimensions, as tinylm's YaRN does
    scaling = {k: v for k, v in parameters.items() if k != "rope_theta"} if rule != "none" else None
    return {"rope_theta": theta, "rope_parameters": parameters, "rope_scaling": scaling}


def _max_positions(config: ModelConfig) -> int:
    return config.rope_base_context if config.rope_scaling == "dynamic" else config.context_length


def _sliding(config: ModelConfig) -> dict[str, Any]:
    window = config.sliding_window
    kind = "sliding_attention" if window is not None else "full_attention"
    return {"use_sliding_window": window is not None, "sliding_window": window, "max_window_layers": 0,
            "layer_types": [kind] * config.n_blocks}


def hf_config_dict(config: ModelConfig, **token_ids: Any) -> dict[str, Any]:
    """The `config.json` of the `transformers` model equal to ours (token ids: bos/eos/pad_token_id)."""
    architecture = hf_architecture(config)
    head = {"architectures": [architecture], "model_type": MODEL_TYPES[architecture]}
    if architecture == "GPT2LMHeadModel":
        return {
            **head, "vocab_size": config.vocab_size, "n_positions": config.context_length, "n_embd": config.n_embed,
            "n_layer": config.n_blocks, "n_head": config.n_head, "n_inner": config.mlp_width,
            "activation_function": HF_ACTIVATION[config.mlp_activation], "layer_norm_epsilon": config.layer_norm_eps,
            "resid_pdrop": config.dropout, "embd_pdrop": config.dropout, "attn_pdrop": config.dropout,
            "initializer_range": config.init_std, "scale_attn_weights": True, "scale_attn_by_inverse_layer_idx": False,
            "reorder_and_upcast_attn": False, "tie_word_embeddings": config.tie_embeddings,
            "bos_token_id": None, "eos_token_id": None, **token_ids,
        }
    common = {
        **head, "vocab_size": config.vocab_size, "hidden_size": config.n_embed,
        "intermediate_size": config.mlp_width, "num_hidden_layers": config.n_blocks,
        "num_attention_heads": config.n_head, "num_key_value_heads": config.kv_heads, "head_dim": config.dim_per_head,
        "hidden_act": "silu", "max_position_embeddings": _max_positions(config), "initializer_range": config.init_std,
        "rms_norm_eps": config.norm_eps, "tie_word_embeddings": config.tie_embeddings, **_rope(config),
        "attention_bias": False, "attention_dropout": config.dropout, **token_ids,
    }
    moe = {"num_experts_per_tok": config.n_experts_per_token, "moe_intermediate_size": config.expert_width,
           "router_aux_loss_coef": config.moe_aux_loss_coef, "output_router_logits": False}
    if architecture == "LlamaForCausalLM":
        return {**common, "mlp_bias": False}
    if architecture == "MistralForCausalLM":
        return {**common, "sliding_window": config.sliding_window}
    if architecture == "Qwen3ForCausalLM":
        return {**common, **_sliding(config)}
    if architecture == "Qwen2MoeForCausalLM":
        return {**common, **moe, "num_experts": config.n_experts, "norm_topk_prob": config.moe_norm_topk_prob,
                "shared_expert_intermediate_size": config.expert_width * config.n_shared_experts,
                "qkv_bias": False, "decoder_sparse_step": 1, "mlp_only_layers": [], **_sliding(config)}
    if architecture == "Qwen3MoeForCausalLM":
        return {**common, **moe, "num_experts": config.n_experts, "norm_topk_prob": config.moe_norm_topk_prob,
                "decoder_sparse_step": 1, "mlp_only_layers": [], **_sliding(config)}
    if architecture == "MixtralForCausalLM":
        moe.pop("moe_intermediate_size")  # Mixtral's experts are intermediate_size wide
        return {**common, **moe, "intermediate_size": config.expert_width, "num_local_experts": config.n_experts,
                "router_jitter_noise": 0.0, "sliding_window": config.sliding_window}
    # DeepseekV3: every layer dense (first_k_dense_replace = n_layers), so its MoE fields are inert placeholders
    del common["head_dim"]  # DeepseekV3 derives head_dim = qk_rope_head_dim itself
    return {**common, "num_key_value_heads": config.n_head, "kv_lora_rank": config.kv_lora_rank,
            "q_lora_rank": config.q_lora_rank, "qk_rope_head_dim": config.qk_rope_head_dim,
            "qk_nope_head_dim": config.nope_dim, "v_head_dim": config.value_dim, "rope_interleave": False,
            "first_k_dense_replace": config.n_blocks, "moe_intermediate_size": config.mlp_width,
            "n_routed_experts": 1, "num_experts_per_tok": 1, "n_group": 1, "topk_group": 1, "n_shared_experts": 0,
            "num_mtp_layers": 0}


def hf_config(config: ModelConfig, **token_ids: Any):
    """A live `transformers` config with the same shapes, norms and RoPE as `config`."""
    import transformers  # optional heavy dependency: only live models need it

    data = hf_config_dict(config, **token_ids)
    return transformers.AutoConfig.for_model(data.pop("model_type"), **data)


# ---- weights -----------------------------------------------------------------------------------
def to_hf_weights(weights: dict[str, torch.Tensor], config: ModelConfig) -> dict[str, torch.Tensor]:
    """Our state dict under `transformers` names; a tied head is written once, as the embedding."""
    architecture = hf_architecture(config)
    weights = dict(weights)
    if config.tie_embeddings:
        weights.pop("lm_head.weight", None)
    if architecture == "GPT2LMHeadModel":
        head_bias = weights.pop("lm_head.bias", None)  # only with head_bias=True (the seed's 13m preset)
        if head_bias is not None and head_bias.abs().max().item() != 0.0:
            raise _refuse("a classic model whose lm_head bias is not zero", "GPT-2's head has no bias")
        dtype = weights["token_embed.weight"].dtype
        for i in range(config.n_blocks):  # GPT-2's c_attn always has a bias; ours may not
            weights.setdefault(f"blocks.{i}.attn.qkv.bias", torch.zeros(3 * config.n_embed, dtype=dtype))
    return rename(weights, architecture, to_hf=True)


def hf_state_dict(model: nn.Module) -> dict[str, torch.Tensor]:
    """A model's weights under `transformers` names (see `to_hf_weights`)."""
    return to_hf_weights(model.state_dict(), model.config)


def write_hf_folder(folder: str | Path, weights: dict[str, torch.Tensor], config: ModelConfig,
                    **token_ids: Any) -> None:
    """Write config.json and model.safetensors as `transformers` reads them (MoE experts one tensor each)."""
    folder = Path(folder)
    hf_weights = {k: v.detach().to("cpu").contiguous() for k, v in to_hf_weights(weights, config).items()}
    save_safetensors(hf_weights, folder / "model.safetensors", metadata={"format": "pt"})
    data = {**hf_config_dict(config, **token_ids), "dtype": _dtype_name(next(iter(hf_weights.values())).dtype)}
    (folder / "config.json").write_text(json.dumps(data, indent=2) + "\n", encoding="utf-8")


def _dtype_name(dtype: torch.dtype) -> str:
    return str(dtype).removeprefix("torch.")


def to_hf_model(model: nn.Module, **token_ids: Any) -> nn.Module:
    """A `transformers` CausalLM holding copies of our weights, in eval mode, in float32.

    It goes through the files `tinylm export` writes and `from_pretrained`, so what is tested is
    what users load (MoE experts are stored one tensor per expert and fused by `transformers`).
    """
    import transformers  # optional heavy dependency: only live models need it

    with tempfile.TemporaryDirectory() as folder:
        write_hf_folder(folder, model.state_dict(), model.config, **token_ids)
        hf_model, info = transformers.AutoModelForCausalLM.from_pretrained(
            folder, dtype=torch.float32, output_loading_info=True)
    problems = {k: v for k, v in info.items() if v and k in ("missing_keys", "unexpected_keys", "mismatched_keys")}
    if problems:
        raise RuntimeError(f"weight mapping mismatch: {problems}")
    return hf_model.eval()


def state_dict_from_hf(hf_state: dict[str, torch.Tensor], config: ModelConfig) -> dict[str, torch.Tensor]:
    """`transformers` weights renamed to ours; the inverse of `to_hf_weights` (tied head filled in)."""
    architecture = hf_architecture(config)
    hf_state = {k: v for k, v in hf_state.items() if not k.endswith(("rotary_emb.inv_freq", ".attn.bias",
                                                                      ".attn.masked_bias"))}
    if config.tie_embeddings:
        hf_state.pop("lm_head.weight", None)
    out = rename(hf_state, architecture, to_hf=False)
    if architecture == "GPT2LMHeadModel":
        if config.head_bias:
            out["lm_head.bias"] = torch.zeros(config.vocab_size, dtype=out["token_embed.weight"].dtype)
        if not config.qkv_bias:
            for i in range(config.n_blocks):
                out.pop(f"blocks.{i}.attn.qkv.bias", None)
    if config.tie_embeddings:
        out["lm_head.weight"] = out["token_embed.weight"]
    return out
