"""Position interpolation (Chen et al. 2023): read position p as p / factor.

Dividing every frequency by the factor squeezes a window `factor` times longer into the angles the
model saw in training, so no angle is new; the price is that neighbouring tokens now differ by a
fraction of the rotation they used to, which a short continued training teaches the model to read.
"""

from __future__ import annotations

import torch


def linear_inverse_frequencies(inv_freq: torch.Tensor, factor: float) -> torch.Tensor:
    return inv_freq / factor
