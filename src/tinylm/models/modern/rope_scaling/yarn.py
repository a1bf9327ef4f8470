"""YaRN (Peng et al. 2023): interpolate only the frequencies that never turned far in training.

A dimension pair whose wavelength 2 pi / f fits many times into the original context L0 has seen every
angle already: it keeps its frequency (extrapolation is safe). A pair that turns less than once in L0
is divided by the factor, as position interpolation does. Between the two, counted in full turns over L0
(beta_fast turns and beta_slow turns), a linear ramp mixes them. The dimension index where a pair makes
r turns over L0 is

    d * ln(L0 / (2 pi r)) / (2 ln theta)

(floored / ceiled to whole dimensions). Softmax over a longer window is flatter; YaRN sharpens it back by
multiplying cos and sin by 0.1 ln(factor) + 1 (so every logit by its square), unless the model says
otherwise (`yarn_attention_factor`).
"""

from __future__ import annotations

import math

import torch


def turns_to_dimension(turns: float, dim: int, theta: float, original_context: int) -> float:
    return dim * math.log(original_context / (turns * 2 * math.pi)) / (2 * math.log(theta))


def yarn_inverse_frequencies(dim: int, theta: float, factor: float, original_context: int, beta_fast: float,
                             beta_slow: float) -> torch.Tensor:
    kept = 1.0 / (theta ** (torch.arange(0, dim, 2).float() / dim))
    interpolated = kept / factor
    low = max(math.floor(turns_to_dimension(beta_fast, dim, theta, original_context)), 0)
    high = min(math.ceil(turns_to_dimension(beta_slow, dim, theta, original_context)), dim - 1)
    if low == high:
        high += 0.001  # a ramp of no width would divide by zero; this makes it a step
    ramp = ((torch.arange(dim // 2, dtype=torch.float32) - low) / (high - low)).clamp(0, 1)  # 0: keep, 1: divide
    return kept * (1 - ramp) + interpolated * ramp


def yarn_attention_factor(factor: float, given: float | None = None) -> float:
    if given is not None:
        return given
    return 1.0 if factor <= 1 else 0.1 * math.log(factor) + 1.0
