"""The ablations `tinylm compare --variants` knows: each is a change to the modern preset, defined here only.

A variant is a function of the preset's config, because some changes depend on its shape (GQA
halves the query heads' count, a window is a quarter of the context). MoE keeps the active
parameters of the dense MLP: top-2 of 4 experts, each half as wide.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from tinylm.config import ModelConfig
from tinylm.errors import TinyLMError

Overrides = Callable[[ModelConfig], dict[str, Any]]

VARIANTS: dict[str, tuple[str, Overrides]] = {
    "mha": ("multi-head attention: one KV head per query head", lambda c: {"n_kv_head": c.n_head}),
    "gqa": ("grouped-query attention: half as many KV heads as query heads",
            lambda c: {"n_kv_head": max(1, c.n_head // 2)}),
    "mqa": ("multi-query attention: one KV head", lambda c: {"n_kv_head": 1}),
    "mla": ("multi-head latent attention (DeepSeek-V2/V3)", lambda c: {"attention": "mla", "n_kv_head": None}),
    "moe": ("mixture of experts: top-2 of 4 experts of half width (dense active size)",
            lambda c: {"n_experts": 4, "n_experts_per_token": 2, "moe_hidden": c.mlp_width // 2}),
    "window": ("sliding-window attention over a quarter of the context",
               lambda c: {"sliding_window": max(1, c.context_length // 4)}),
    "gated": ("sigmoid output gate on every attention head (Qwen3-Next)", lambda c: {"attn_output_gate": True}),
    "qknorm": ("RMSNorm on queries and keys (Qwen 3, Gemma 3)", lambda c: {"qk_norm": True}),
}


def variant_overrides(name: str, base: ModelConfig) -> dict[str, Any]:
    """The config changes of variant `name` applied to `base` (a modern config)."""
    if name not in VARIANTS:
        raise TinyLMError(f"unknown variant {name!r}: choose from {', '.join(VARIANTS)}")
    return VARIANTS[name][1](base)
