"""Reading a `transformers` config.json as a tinylm ModelConfig, refusing whatever would not map exactly.

Every field the config carries is either read, known to be inert (`_INERT_KEYS`: token ids, dropout,
bookkeeping) or refused by name, so an imported model never silently computes something else than
its source: a RoPE scaling, a bias, a partly windowed attention or an unknown field is one line.
The result leaves derivable sizes at None, so an imported config reads like one written by hand.
The opposite direction (our config as a `config.json`) is `hf_config_dict` in interop/hf.py.
"""

from __future__ import annotations

from typing import Any

from tinylm.config import ModelConfig, swiglu_hidden
from tinylm.errors import TinyLMError
from tinylm.interop.hf import ARCHITECTURES, DEEPSEEK_LATENT_NORM_EPS, HF_ACTIVATION, ROPE_KEYS

# keys a config.json may carry that do not change what the model computes
_INERT_KEYS = frozenset({
    "architectures", "model_type", "transformers_version", "torch_dtype", "dtype", "bos_token_id", "eos_token_id",
    "pad_token_id", "use_cache", "initializer_range", "attention_dropout", "pretraining_tp", "_name_or_path",
    "output_router_logits", "router_aux_loss_coef", "resid_pdrop", "embd_pdrop", "attn_pdrop", "summary_type",
    "summary_use_proj", "summary_activation", "summary_proj_to_labels", "summary_first_dropout",
    "add_cross_attention", "n_ctx", "task_specific_params", "output_attentions", "output_hidden_states",
    "return_dict", "max_window_layers", "router_jitter_noise",
    # generic PretrainedConfig attributes (a live config's to_dict() lists them)
    "chunk_size_feed_forward", "id2label", "label2id", "is_encoder_decoder", "problem_type", "tokenizer_class",
    "prefix", "sep_token_id", "decoder_start_token_id", "tie_encoder_decoder",
})


class _Reader:
    """Reads fields off a `config.json` dict, remembering which were used, so leftovers can be refused."""

    def __init__(self, data: dict[str, Any]) -> None:
        self.data, self.used = data, set(_INERT_KEYS)

    def get(self, key: str, default: Any = None) -> Any:
        self.used.add(key)
        return self.data.get(key, default)

    def need(self, key: str) -> Any:
        self.used.add(key)
        if key not in self.data:
            raise TinyLMError(f"config.json lacks {key!r}")
        return self.data[key]

    def expect(self, key: str, wanted: Any, feature: str) -> None:
        value = self.get(key, wanted)
        if value != wanted:
            raise TinyLMError(f"unsupported {feature}: {key}={value!r} (tinylm supports {wanted!r})")

    def leftovers(self) -> list[str]:
        return sorted(set(self.data) - self.used)


def _rope_fields(r: _Reader) -> dict[str, Any]:
    """rope_theta and the scaling rule's fields, from rope_parameters (transformers >= 5) or rope_scaling."""
    def kind_of(source: dict) -> str:
        return source.get("rope_type", source.get("type", "default"))

    old, new = r.get("rope_scaling") or {}, r.get("rope_parameters") or {}
    if old and new and kind_of(old) != kind_of(new):
        raise TinyLMError(f"conflicting RoPE settings: rope_scaling says {kind_of(old)!r}, rope_parameters says "
                          f"{kind_of(new)!r}")
    params = {**old, **new}
    kind = kind_of(params)
    fields: dict[str, Any] = {"rope_theta": float(params.get("rope_theta", r.get("rope_theta", 10000.0)))}
    known = {"rope_type", "type", "rope_theta"} | set(ROPE_KEYS.get(kind, {}))
    if kind not in ("default", *ROPE_KEYS):
        raise TinyLMError(f"unsupported rope_scaling {kind!r}: tinylm has none, linear, dynamic, yarn and llama3")
    if kind == "yarn" and params.get("truncate", True) is not True:
        raise TinyLMError("unsupported rope parameters truncate=false: tinylm's YaRN rounds its ramp to whole "
                          "dimensions, as the paper does")
    extra = sorted(set(params) - known - ({"truncate"} if kind == "yarn" else set()))
    if extra:
        raise TinyLMError(f"unsupported rope parameters {', '.join(extra)} for rope_type {kind!r}")
    if kind != "default":
        fields["rope_scaling"] = kind
        fields.update({ROPE_KEYS[kind][key]: value for key, value in params.items() if key in ROPE_KEYS[kind]
                       and value is not None})
    return fields


def _window(r: _Reader, per_layer_flag: bool) -> int | None:
    """The sliding window if every layer uses it, None if none does; a mix is refused."""
    window = r.get("sliding_window")
    if per_layer_flag and not r.get("use_sliding_window", False):
        window = None
    kinds = set(r.get("layer_types") or [])
    if window is not None and kinds - {"sliding_attention"} and per_layer_flag:
        raise TinyLMError("unsupported: sliding-window attention in only some layers (tinylm windows all or none)")
    if window is None and kinds - {"full_attention"}:
        raise TinyLMError(f"unsupported layer_types {sorted(kinds)}")
    return window or None


def config_from_hf(hf: Any) -> ModelConfig:
    """The tinylm config of a `transformers` config (object or `config.json` dict), refusing what it cannot hold."""
    data = hf if isinstance(hf, dict) else hf.to_dict()
    model_type = data.get("model_type")
    if model_type not in ARCHITECTURES:
        names = ", ".join(sorted(ARCHITECTURES))
        raise TinyLMError(f"unsupported architecture {(data.get('architectures') or [model_type])[0]!r} "
                          f"(model_type {model_type!r}); tinylm reads {names}")
    r = _Reader(data)
    if model_type == "gpt2":
        config = _classic_from_hf(r)
    else:
        config = _modern_from_hf(r, model_type)
    leftovers = r.leftovers()
    if leftovers:
        raise TinyLMError(f"unsupported {model_type} config field(s): {', '.join(leftovers)}")
    return config


def _classic_from_hf(r: _Reader) -> ModelConfig:
    activation = r.get("activation_function", "gelu_new")  # GPT2Config's default
    by_name = {name: ours for ours, name in HF_ACTIVATION.items()}
    if activation not in by_name:
        raise TinyLMError(f"unsupported activation_function={activation!r}: the classic MLP is relu or gelu_new")
    r.expect("scale_attn_weights", True, "attention scaling")
    r.expect("scale_attn_by_inverse_layer_idx", False, "attention scaling")
    r.expect("reorder_and_upcast_attn", False, "attention upcasting")
    n_embed = r.need("n_embd")
    inner = r.get("n_inner")
    if inner not in (None, 4 * n_embed):
        raise TinyLMError(f"unsupported n_inner={inner}: the classic MLP is 4 * n_embd wide")
    return ModelConfig(
        arch="classic", vocab_size=r.need("vocab_size"), context_length=r.need("n_positions"), n_embed=n_embed,
        n_head=r.need("n_head"), n_blocks=r.need("n_layer"), layer_norm_eps=r.get("layer_norm_epsilon", 1e-5),
        tie_embeddings=bool(r.get("tie_word_embeddings", True)), qkv_bias=True,
        init_std=r.get("initializer_range", 0.02), mlp_activation=by_name[activation],
    )


def _modern_from_hf(r: _Reader, model_type: str) -> ModelConfig:
    r.expect("hidden_act", "silu", "hidden_act (tinylm's SwiGLU uses silu)")
    r.expect("attention_bias", False, "attention biases")
    r.expect("mlp_bias", False, "MLP biases")
    r.expect("qkv_bias", False, "attention biases")
    n_head = r.need("num_attention_heads")
    fields: dict[str, Any] = dict(
        arch="modern", vocab_size=r.need("vocab_size"), context_length=r.need("max_position_embeddings"),
        n_embed=r.need("hidden_size"), n_head=n_head, n_kv_head=r.get("num_key_value_heads") or n_head,
        n_blocks=r.need("num_hidden_layers"), mlp_hidden=r.need("intermediate_size"),
        norm_eps=r.get("rms_norm_eps", 1e-6), **_rope_fields(r),
        tie_embeddings=bool(r.get("tie_word_embeddings", False)),
        init_std=r.get("initializer_range", 0.02), qk_norm=model_type in ("qwen3", "qwen3_moe"),
    )
    if fields.get("rope_scaling") == "dynamic":  # transformers' dynamic rule starts at max_position_embeddings
        fields["rope_original_context"] = fields["context_length"]
        fields["context_length"] = int(fields["context_length"] * fields.get("rope_factor", 1.0))
    head_dim = r.get("head_dim")
    if head_dim is not None and model_type != "deepseek_v3":
        fields["head_dim"] = head_dim
    if model_type in ("mistral", "mixtral"):
        fields["sliding_window"] = _window(r, per_layer_flag=False)
    elif model_type in ("qwen3", "qwen3_moe", "qwen2_moe"):
        fields["sliding_window"] = _window(r, per_layer_flag=True)
    else:
        if any(kind != "full_attention" for kind in r.get("layer_types") or []):
            raise TinyLMError("unsupported layer_types: tinylm's Llama/DeepSeek layers attend to the full context")
    if model_type in ("qwen2_moe", "qwen3_moe"):
        r.expect("decoder_sparse_step", 1, "decoder_sparse_step (tinylm's MoE is in every layer)")
        r.expect("mlp_only_layers", [], "mlp_only_layers (tinylm's MoE is in every layer)")
        n_experts = r.get("num_experts") or r.need("num_local_experts")  # qwen3_moe aliases the two
        fields.update(n_experts=n_experts, n_experts_per_token=r.need("num_experts_per_tok"),
                      moe_hidden=r.need("moe_intermediate_size"), moe_norm_topk_prob=bool(r.get("norm_topk_prob")))
        if model_type == "qwen2_moe":
            shared = r.need("shared_expert_intermediate_size")
            if shared % fields["moe_hidden"]:
                raise TinyLMError(f"unsupported shared_expert_intermediate_size={shared}: "
                                  f"tinylm needs a multiple of moe_intermediate_size={fields['moe_hidden']}")
            fields.update(n_shared_experts=shared // fields["moe_hidden"], moe_shared_expert_gate=True)
    if model_type == "mixtral":
        fields.update(n_experts=r.need("num_local_experts"), n_experts_per_token=r.need("num_experts_per_tok"),
                      moe_hidden=fields.pop("mlp_hidden"))
    if model_type == "deepseek_v3":
        layers = fields["n_blocks"]
        r.expect("first_k_dense_replace", layers, "first_k_dense_replace (tinylm reads dense DeepseekV3 models only)")
        r.expect("rope_interleave", False, "rope_interleave (tinylm's RoPE rotates halves)")
        r.expect("num_mtp_layers", 0, "multi-token-prediction layers")
        r.expect("num_nextn_predict_layers", 0, "multi-token-prediction layers")
        r.expect("num_key_value_heads", n_head, "num_key_value_heads")
        for inert in ("n_routed_experts", "num_experts_per_tok", "n_group", "topk_group", "n_shared_experts",
                      "moe_intermediate_size", "routed_scaling_factor", "norm_topk_prob", "qk_head_dim"):
            r.get(inert)  # MoE fields of a model with no MoE layer
        if fields["norm_eps"] != DEEPSEEK_LATENT_NORM_EPS:
            raise TinyLMError(f"unsupported rms_norm_eps={fields['norm_eps']}: DeepseekV3's latent norms use 1e-6 "
                              "and tinylm's use rms_norm_eps")
        fields.pop("n_kv_head")
        fields.update(attention="mla", kv_lora_rank=r.need("kv_lora_rank"), q_lora_rank=r.get("q_lora_rank"),
                      qk_rope_head_dim=r.need("qk_rope_head_dim"), qk_nope_head_dim=r.need("qk_nope_head_dim"),
                      v_head_dim=r.need("v_head_dim"))
    return _canonical(fields, model_type)


def _canonical(fields: dict[str, Any], model_type: str) -> ModelConfig:
    """A ModelConfig that leaves derivable sizes at None, so an imported config reads like one written by hand."""
    n_embed, n_head = fields["n_embed"], fields["n_head"]
    defaults = {"head_dim": n_embed // n_head if n_embed % n_head == 0 else None,
                "mlp_hidden": swiglu_hidden(n_embed)}
    for name, default in defaults.items():
        if fields.get(name) == default:
            fields[name] = None
    width = fields.get("mlp_hidden") or swiglu_hidden(n_embed)
    if fields.get("moe_hidden") == width:
        fields["moe_hidden"] = None
    for name in ("qk_nope_head_dim", "v_head_dim"):
        if name in fields and fields[name] == (fields.get("head_dim") or n_embed // n_head):
            fields[name] = None
    try:
        return ModelConfig(**fields)
    except ValueError as exc:
        raise TinyLMError(f"cannot represent this {model_type} model: {exc}") from None
