"""Which llama.cpp architecture computes what a tinylm model computes, and the GGUF keys that say so.

A GGUF file names an architecture; llama.cpp then runs its own graph for it, reading only the
hyper-parameters that graph knows. So a model is written only where that graph is ours exactly:

    modern, dense                 llama   (RoPE on interleaved pairs: q/k rows permuted, see gguf_tensors.py)
    modern, dense, QK-norm        qwen3   (rotate-half RoPE, as ours: no permutation)
    classic with GELU             gpt2    (LayerNorm with biases, learned positions, fused qkv)

Everything else is refused with one line naming the field, because llama.cpp would load the file
and silently compute something else: the classic model's ReLU (llama.cpp's gpt2 applies GELU),
latent attention, the attention output gate, a sliding window, mixture of experts (not verified).
"""

from __future__ import annotations

from typing import Any

from tinylm.config import ModelConfig
from tinylm.errors import TinyLMError


def _refuse(field: str, why: str) -> TinyLMError:
    return TinyLMError(f"cannot export to GGUF: {field}: {why}")


def gguf_architecture(config: ModelConfig) -> str:
    """'llama', 'qwen3' or 'gpt2': the llama.cpp graph equal to this model, or one line naming what is not."""
    if config.logit_softcap is not None:
        raise _refuse(f"logit_softcap={config.logit_softcap:g}", "llama.cpp caps the logits only in its gemma2 "
                      "graph, not in the llama, qwen3 or gpt2 ones")
    if config.arch == "classic":
        if config.mlp_activation != "gelu":
            raise _refuse(f"mlp_activation={config.mlp_activation!r}", "llama.cpp's gpt2 graph applies GELU; "
                          "train the classic model with mlp_activation=gelu to export it")
        return "gpt2"
    if config.rope_scaling == "dynamic":
        raise _refuse("rope_scaling='dynamic'", "llama.cpp's RoPE frequencies are fixed per file; it has no dynamic "
                      "NTK (export to transformers, which has)")
    if config.rope_scaling == "llama3" and config.qk_norm:
        raise _refuse("rope_scaling='llama3' with qk_norm", "llama.cpp reads Llama 3.1's rule as a rope_freqs "
                      "tensor in its llama graph; its qwen3 graph is not verified to (export to transformers)")
    if (config.yarn_beta_fast, config.yarn_beta_slow) != (32.0, 1.0):
        raise _refuse(f"yarn_beta_fast={config.yarn_beta_fast:g}, yarn_beta_slow={config.yarn_beta_slow:g}",
                      "llama.cpp (node-llama-cpp 3.21.1's build, tested) takes YaRN's betas from its command line, "
                      "32 and 1, not from the file")
    if config.yarn_attention_factor is not None:
        raise _refuse(f"yarn_attention_factor={config.yarn_attention_factor:g}", "llama.cpp derives YaRN's "
                      "temperature from the factor (0.1 ln(factor) + 1)")
    if config.attention == "mla":
        raise _refuse("attention='mla'", "tinylm's latent attention keeps rotate-half RoPE and its own latent norms, "
                      "which llama.cpp's deepseek2 graph does not compute as tinylm does (not verified)")
    if config.mlp_type == "relu2":
        raise _refuse("mlp_type=relu2", "llama.cpp's llama and qwen3 graphs apply a gated (SwiGLU) MLP")
    if config.attn_output_gate:
        raise _refuse("attn_output_gate=true", "no llama.cpp graph gates attention heads with sigmoid(W_g x) "
                      "as tinylm does")
    if config.sliding_window is not None:
        raise _refuse(f"sliding_window={config.sliding_window}", "llama.cpp's llama and qwen3 graphs attend to the "
                      "whole context")
    if config.is_moe:
        raise _refuse(f"n_experts={config.n_experts}", "tinylm's mixture of experts is not verified against "
                      "llama.cpp's routing")
    return "qwen3" if config.qk_norm else "llama"


def hyperparameters(config: ModelConfig, architecture: str) -> dict[str, Any]:
    """The `{architecture}.*` keys (without the prefix) llama.cpp's graph reads for this model."""
    common = {
        "context_length": config.context_length, "embedding_length": config.n_embed,
        "block_count": config.n_blocks, "feed_forward_length": config.mlp_width,
        "attention.head_count": config.n_head, "vocab_size": config.vocab_size,
    }
    if architecture == "gpt2":
        return {**common, "attention.head_count_kv": config.n_head,
                "attention.layer_norm_epsilon": float(config.layer_norm_eps)}
    head_dim = config.dim_per_head
    return {
        **common, "attention.head_count_kv": config.kv_heads,
        "attention.layer_norm_rms_epsilon": float(config.norm_eps),
        "attention.key_length": head_dim, "attention.value_length": head_dim,
        "rope.dimension_count": head_dim,  # every dimension of a head rotates
        "rope.freq_base": float(config.rope_theta),
        **rope_scaling_keys(config),
    }


def rope_scaling_keys(config: ModelConfig) -> dict[str, Any]:
    """The `rope.scaling.*` keys llama.cpp reads for linear and YaRN. Llama 3.1's rule has none: it is the
    `rope_freqs` tensor (gguf_tensors.py), as llama.cpp's own converter writes it; dynamic NTK is refused."""
    if config.rope_scaling in ("none", "llama3"):
        return {}
    keys: dict[str, Any] = {"rope.scaling.type": config.rope_scaling, "rope.scaling.factor": float(config.rope_factor),
                            "rope.scaling.original_context_length": config.rope_base_context}
    return keys  # YaRN's betas are llama.cpp's defaults (32, 1): other values are refused above
