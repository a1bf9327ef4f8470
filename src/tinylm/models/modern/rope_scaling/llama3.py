"""Llama 3.1's rule: three frequency bands, split by wavelength against the original context.

With L0 the original context, a pair whose wavelength 2 pi / f is shorter than L0 / high_freq_factor
is kept; one longer than L0 / low_freq_factor is divided by the factor; in between, the two are mixed
by how many times the wavelength fits in L0:

    s = (L0 / wavelength - low_freq_factor) / (high_freq_factor - low_freq_factor)
    f' = (1 - s) * f / factor + s * f

It is YaRN's idea with the band edges in wavelengths, and no attention temperature.
"""

from __future__ import annotations

import math

import torch


def llama3_inverse_frequencies(inv_freq: torch.Tensor, factor: float, original_context: int,
                               low_freq_factor: float, high_freq_factor: float) -> torch.Tensor:
    wavelength = 2 * math.pi / inv_freq
    long_edge, short_edge = original_context / low_freq_factor, original_context / high_freq_factor
    smooth = (original_context / wavelength - low_freq_factor) / (high_freq_factor - low_freq_factor)
    mixed = (1 - smooth) * inv_freq / factor + smooth * inv_freq
    scaled = torch.where(wavelength > long_edge, inv_freq / factor, inv_freq)
    between = (wavelength >= short_edge) & (wavelength <= long_edge)
    return torch.where(between, mixed, scaled)
