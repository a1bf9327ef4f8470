"""Named model sizes, each available for both architectures.

`tiny` is fixed so results can be compared with other projects (the modern one has exactly the
parameter count of `transformers` `LlamaForCausalLM` at the same config: 1,311,872). `13m` is the
seed's classic configuration (13,142,656 parameters, which include the seed's output-head bias: the
one preset that keeps `head_bias=True`; every other classic model has GPT-2's bias-free head).
The larger ones follow GPT-2 (124m, 350m) and Llama 3.2 (1b, 3b) shapes,
with the r50k vocabulary padded to a multiple of 64 (50304).
"""

from __future__ import annotations

from typing import Any

from tinylm.config import ModelConfig

# shape shared by both archs; `kv` is the modern model's n_kv_head
_SHAPES: dict[str, dict[str, Any]] = {
    "tiny": dict(vocab_size=4096, context_length=256, n_embed=128, n_head=4, n_blocks=4, kv=2),
    "student": dict(vocab_size=4096, context_length=512, n_embed=256, n_head=8, n_blocks=6, kv=4),
    "small": dict(vocab_size=8192, context_length=512, n_embed=384, n_head=6, n_blocks=8, kv=2),
    "13m": dict(vocab_size=50304, context_length=128, n_embed=128, n_head=8, n_blocks=1, kv=4),
    "77m": dict(vocab_size=50304, context_length=512, n_embed=512, n_head=8, n_blocks=8, kv=4),
    "124m": dict(vocab_size=50304, context_length=1024, n_embed=768, n_head=12, n_blocks=12, kv=4),
    "350m": dict(vocab_size=50304, context_length=1024, n_embed=1024, n_head=16, n_blocks=24, kv=8),
    "1b": dict(vocab_size=50304, context_length=2048, n_embed=2048, n_head=32, n_blocks=16, kv=8),
    "3b": dict(vocab_size=50304, context_length=2048, n_embed=3072, n_head=24, n_blocks=28, kv=8),
}

PRESETS: tuple[str, ...] = tuple(_SHAPES)

# classic-only settings a preset fixes beyond its shape
_CLASSIC_EXTRAS: dict[str, dict[str, Any]] = {"13m": dict(head_bias=True)}


def preset_config(name: str, arch: str = "modern", **overrides: Any) -> ModelConfig:
    """The ModelConfig of a named preset for one architecture, with optional field overrides."""
    if name not in _SHAPES:
        raise ValueError(f"unknown preset {name!r}: choose one of {', '.join(PRESETS)}")
    shape = dict(_SHAPES[name])
    kv = shape.pop("kv")
    if arch == "classic":
        base = dict(arch="classic", tie_embeddings=False, **shape, **_CLASSIC_EXTRAS.get(name, {}))
    elif arch == "modern":
        base = dict(arch="modern", tie_embeddings=True, n_kv_head=kv, **shape)
    else:
        raise ValueError(f"unknown arch {arch!r}: choose 'classic' or 'modern'")
    base.update(overrides)
    return ModelConfig(**base)
