"""Model FLOP utilization: the fraction of the hardware's peak that the model's own math uses.

MFU = (training FLOPs per token x tokens per second) / (peak FLOP/s x devices). Only the model's
FLOPs count (6N plus attention, from `model.flops_per_token`), not recomputation from gradient
checkpointing or optimizer work, so MFU compares setups fairly: a trick that makes training faster
raises it, one that only adds work does not. PaLM (Chowdhery et al., 2022) introduced the measure.
"""

from __future__ import annotations


def model_flops_utilization(flops_per_token: float, tokens_per_s: float, peak_flops: float | None,
                            n_devices: int = 1) -> float | None:
    """MFU in [0, 1] (above 1 means the peak is wrong); None when the peak is unknown."""
    if not peak_flops or peak_flops <= 0 or tokens_per_s <= 0:
        return None
    return flops_per_token * tokens_per_s / (peak_flops * n_devices)
