"""What the fast decoder computes, as data: every `ModelConfig` field, classified.

`FastDecoder` (fast_decode.py) re-implements the modern block by hand, so a block feature it was
never taught would be computed wrong without any error. Hence every field of `ModelConfig` is named
here, in exactly one of two tables:

- `HANDLED`: the values the fast decoder computes exactly as the model does (`ANY` = every value).
  A feature it cannot compute lists only the values it can, so any other value is refused.
- `IRRELEVANT`: fields decoding never reads on the fast path, each with the reason.

A config with a refused value, or with a field missing from both tables, decodes through the
model's own forward instead (`runners.runner_choice` says why). tests/test_fast_decode.py fails
while a `ModelConfig` field is unclassified: a new field must be decided on here before it ships.
"""

from __future__ import annotations

from dataclasses import fields
from typing import Any

from tinylm.config import ModelConfig

ANY = None  # every value of the field is handled

HANDLED: dict[str, tuple[Any, ...] | None] = {
    "arch": ("modern",),  # the classic model has no KV cache and its own block
    "attention": ("standard",),  # MLA caches latents, not keys and values
    "vocab_size": ANY,
    "context_length": ANY,
    "n_embed": ANY,
    "n_head": ANY,
    "n_blocks": ANY,
    "tie_embeddings": ANY,
    "logit_softcap": ANY,  # the same soft_cap after the head
    "n_kv_head": ANY,
    "head_dim": ANY,
    "mlp_hidden": ANY,
    "mlp_multiple_of": ANY,
    "mlp_type": ANY,  # SwiGLU's gate and up fused into one matmul, or ReLU^2's up alone
    "norm_eps": ANY,
    "rope_theta": ANY,  # the model's own RotaryEmbedding tables
    # a fixed scaling rule is in those tables too; dynamic NTK's change with the length read, and the fast
    # decoder builds one table for its whole capacity
    "rope_scaling": ("none", "linear", "yarn", "llama3"),
    "rope_factor": ANY,
    "rope_original_context": ANY,
    "yarn_beta_fast": ANY,
    "yarn_beta_slow": ANY,
    "yarn_attention_factor": ANY,
    "llama3_low_freq_factor": ANY,
    "llama3_high_freq_factor": ANY,
    "qk_norm": ANY,
    "sliding_window": ANY,
    "attn_output_gate": ANY,
    # mixture of experts: the block calls the model's own MixtureOfExperts module
    "n_experts": ANY,
    "n_experts_per_token": ANY,
    "n_shared_experts": ANY,
    "moe_hidden": ANY,
    "moe_norm_topk_prob": ANY,
    "moe_shared_expert_gate": ANY,
}

_CLASSIC = "classic only: the modern model ignores it (and the fast decoder refuses arch='classic')"
_MLA = "MLA only: unused with attention='standard', the only attention the fast decoder accepts"

IRRELEVANT: dict[str, str] = {
    "dropout": "decoding runs the model in eval mode, where dropout is the identity",
    "init_std": "initialization only: decoding reads the weights as they are",
    "zero_init_head": "initialization only: decoding reads the weights as they are",
    "gradient_checkpointing": "training only: the model checkpoints only when training without a cache",
    "moe_aux_loss_coef": "scales the training loss's load-balancing term, not the logits",
    "extra": "free-form metadata that no model reads",
    "attn_impl": _CLASSIC,
    "qkv_bias": _CLASSIC,
    "head_bias": _CLASSIC,
    "layer_norm_eps": _CLASSIC,
    "mlp_activation": _CLASSIC,
    "kv_lora_rank": _MLA,
    "q_lora_rank": _MLA,
    "qk_nope_head_dim": _MLA,
    "qk_rope_head_dim": _MLA,
    "v_head_dim": _MLA,
}


def unsupported_features(config: ModelConfig) -> list[str]:
    """One line per feature of `config` the fast decoder would not compute exactly; empty if it handles them all."""
    problems = []
    for f in fields(config):
        value = getattr(config, f.name)
        if f.name in IRRELEVANT:
            continue
        if f.name not in HANDLED:
            problems.append(f"{f.name}={value!r} (a field fast_decode_support.py does not classify yet)")
            continue
        allowed = HANDLED[f.name]
        if allowed is not ANY and value not in allowed:
            problems.append(f"{f.name}={value!r} (handled: {', '.join(repr(v) for v in allowed)})")
    return problems


def fast_decode_refusal(config: ModelConfig | None) -> str | None:
    """Why the fast decoder declines a model with this config (one line), or None when it takes it."""
    if config is None:
        return "the fast decoder needs a tinylm model (it has no config)"
    problems = unsupported_features(config)
    return f"the fast decoder does not handle {'; '.join(problems)}" if problems else None
