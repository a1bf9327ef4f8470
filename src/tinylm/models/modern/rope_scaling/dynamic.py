"""Dynamic NTK-aware scaling: raise theta, more the longer the sequence being read.

Raising the base theta slows the low frequencies a lot and the high ones hardly at all (the "NTK-aware"
observation), so local order stays sharp while far positions fold back into trained angles. The dynamic
form leaves RoPE alone up to the original context and, for a sequence of L tokens past it, uses

    theta' = theta * (factor * L / L0 - (factor - 1)) ^ (d / (d - 2))

so a sequence as long as factor * L0 gets the full NTK factor. The frequencies therefore depend on the
length of the sequence read, not only on the model.
"""

from __future__ import annotations


def dynamic_ntk_theta(theta: float, dim: int, factor: float, seq_len: int, original_context: int) -> float:
    length = max(seq_len, original_context)
    return theta * (factor * length / original_context - (factor - 1)) ** (dim / (dim - 2))
