"""Small configs of every model variant, shared by the model, generation and parity tests."""

from __future__ import annotations

from tinylm.config import ModelConfig

BASE = dict(vocab_size=97, context_length=32, n_embed=32, n_head=4, n_blocks=2)

MODERN_VARIANTS: dict[str, dict] = {
    "mha": dict(n_kv_head=4),
    "gqa": dict(n_kv_head=2),
    "mqa": dict(n_kv_head=1),
    "qknorm": dict(n_kv_head=2, qk_norm=True),
    "window": dict(n_kv_head=2, sliding_window=5),
    "gated": dict(n_kv_head=2, attn_output_gate=True),
    "mla": dict(attention="mla", kv_lora_rank=8, qk_rope_head_dim=4, qk_nope_head_dim=8, v_head_dim=8),
    "mla_qlora": dict(attention="mla", kv_lora_rank=8, q_lora_rank=12, qk_rope_head_dim=4),
    "moe": dict(n_kv_head=2, n_experts=4, n_experts_per_token=2, moe_hidden=32),
    "moe_shared": dict(n_kv_head=2, n_experts=4, n_experts_per_token=1, n_shared_experts=1, moe_hidden=32,
                       moe_shared_expert_gate=True),
    "untied": dict(n_kv_head=2, tie_embeddings=False),
    "relu2": dict(n_kv_head=2, mlp_type="relu2"),  # the ungated ReLU^2 MLP instead of SwiGLU
    "softcap": dict(n_kv_head=2, logit_softcap=2.0),  # logits = 2 tanh(head / 2): decoding must sample these
    "wide_heads": dict(n_kv_head=2, head_dim=16),  # n_head * head_dim = 64 != n_embed: q/o widths differ from C
}


def modern_config(variant: str, **overrides) -> ModelConfig:
    return ModelConfig(arch="modern", **{**BASE, **MODERN_VARIANTS[variant], **overrides})


def classic_config(**overrides) -> ModelConfig:
    return ModelConfig(arch="classic", tie_embeddings=False, **{**BASE, **overrides})


def all_configs() -> dict[str, ModelConfig]:
    configs = {name: modern_config(name) for name in MODERN_VARIANTS}
    configs["classic"] = classic_config()
    configs["classic_sdpa"] = classic_config(attn_impl="sdpa")
    return configs
