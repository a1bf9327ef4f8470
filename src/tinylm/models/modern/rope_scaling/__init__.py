"""RoPE scaling: the rules that let a model trained at one context read a longer one.

Each rule rewrites RoPE's inverse frequencies theta^(-2i/d) (and YaRN also scales cos and sin by an
attention temperature); one file per rule says which frequencies it slows down and why:

- `linear.py`   position interpolation (Chen et al. 2023): every frequency / factor
- `dynamic.py`  NTK-aware, dynamic: a larger theta, grown with the sequence actually seen
- `yarn.py`     YaRN (Peng et al. 2023): high frequencies kept, low ones interpolated, a ramp between
- `llama3.py`   Llama 3.1: the same three bands, split by wavelength against the original context

`inverse_frequencies` is the one entry point; at factor 1 every rule is plain RoPE (tested).
"""

from __future__ import annotations

from dataclasses import dataclass

import torch

from tinylm.config import ROPE_RULES, ModelConfig
from tinylm.models.modern.rope_scaling.dynamic import dynamic_ntk_theta
from tinylm.models.modern.rope_scaling.linear import linear_inverse_frequencies
from tinylm.models.modern.rope_scaling.llama3 import llama3_inverse_frequencies
from tinylm.models.modern.rope_scaling.yarn import yarn_attention_factor, yarn_inverse_frequencies

RULES = ROPE_RULES  # the config's choices, one file each here


@dataclass(frozen=True)
class RopeScaling:
    """The fields of `ModelConfig` that decide RoPE's frequencies (see config.py for each one's meaning)."""

    rule: str = "none"
    theta: float = 10000.0
    factor: float = 1.0
    original_context: int = 256
    yarn_beta_fast: float = 32.0
    yarn_beta_slow: float = 1.0
    yarn_attention_factor: float | None = None
    llama3_low_freq_factor: float = 1.0
    llama3_high_freq_factor: float = 4.0

    @classmethod
    def of(cls, config: ModelConfig) -> RopeScaling:
        return cls(config.rope_scaling, config.rope_theta, config.rope_factor, config.rope_base_context,
                   config.yarn_beta_fast, config.yarn_beta_slow, config.yarn_attention_factor,
                   config.llama3_low_freq_factor, config.llama3_high_freq_factor)

    @property
    def depends_on_length(self) -> bool:
        """Dynamic NTK's frequencies change with the sequence length; every other rule's are fixed."""
        return self.rule == "dynamic"


def plain_inverse_frequencies(dim: int, theta: float) -> torch.Tensor:
    """RoPE's own theta^(-2i/d) for i = 0 .. d/2 - 1, in float32."""
    return 1.0 / (theta ** (torch.arange(0, dim, 2, dtype=torch.int64).float() / dim))


def inverse_frequencies(scaling: RopeScaling, dim: int, seq_len: int) -> tuple[torch.Tensor, float]:
    """The rule's inverse frequencies [dim / 2] and the factor cos and sin are multiplied by.

    `seq_len` (the length of the sequence being read) matters only to the dynamic rule.
    """
    rule, factor = scaling.rule, scaling.factor
    if rule == "none":
        return plain_inverse_frequencies(dim, scaling.theta), 1.0
    if rule == "linear":
        return linear_inverse_frequencies(plain_inverse_frequencies(dim, scaling.theta), factor), 1.0
    if rule == "dynamic":
        theta = dynamic_ntk_theta(scaling.theta, dim, factor, seq_len, scaling.original_context)
        return plain_inverse_frequencies(dim, theta), 1.0
    if rule == "yarn":
        inv_freq = yarn_inverse_frequencies(dim, scaling.theta, factor, scaling.original_context,
                                            scaling.yarn_beta_fast, scaling.yarn_beta_slow)
        return inv_freq, yarn_attention_factor(factor, scaling.yarn_attention_factor)
    if rule == "llama3":
        inv_freq = llama3_inverse_frequencies(plain_inverse_frequencies(dim, scaling.theta), factor,
                                              scaling.original_context, scaling.llama3_low_freq_factor,
                                              scaling.llama3_high_freq_factor)
        return inv_freq, 1.0
    raise ValueError(f"unknown rope_scaling {rule!r} (one of {', '.join(RULES)})")
