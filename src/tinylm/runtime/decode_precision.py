"""bf16 weights for decoding where this machine decodes faster with them, fp32 elsewhere.

Decoding reads every weight once per new token, so it is bound by memory traffic, and bf16 halves
the bytes. On a GPU with bf16 that is always a win. On a CPU it depends: the weights of a small model
sit in cache, where the casts and bf16 kernels can cost more than the bytes saved, and only CPUs with
native bf16 dot products (AMX-BF16, AVX512-BF16, Arm BF16) have fast bf16 kernels at all. So on a CPU
the two are measured: greedy cached decoding of this model with fp32 and with bf16 weights,
alternating, best of a few; bf16 is kept only if it is `DECODE_MARGIN` faster. The result is cached
per machine and model shape. Models small enough to stay in cache are not measured: they are bound
by per-token overhead, which bf16 does not shrink.

An int8 model (`int8.quantize_int8`) goes through the same measurement for its activations: with
bf16 activations its products run in torch's weight-only int8 kernel, in float32 they dequantize on
the fly, so the two are timed as well, under their own cache key.

This module holds the policy (the cache, the threshold, the rule); the timing itself runs the
inference engine, which the runtime does not import, so the caller passes it in
(`inference/decode_timing.py`).
"""

from __future__ import annotations

import copy
from collections.abc import Callable

import torch
from torch import nn

from tinylm.runtime.choice import Choice
from tinylm.runtime.device import supports_bf16
from tinylm.runtime.measure_cache import config_digest, load_numbers, store_entry
from tinylm.runtime.precision import native_bf16

CACHE_KIND = "decode_precision"
DECODE_MARGIN = 1.1
# below this, weights stay in cache and bf16 only adds casts: the `tiny` preset (5 MiB) measured 0.6x
# of fp32 on an AVX512-BF16 CPU while `small` (56 MiB) measured 1.9x; smaller models are not measured
MIN_MEASURED_BYTES = 2 * 2**20

# (fp32 model, bf16 copy) -> fp32 seconds / bf16 seconds of the same decode
DecodeRatio = Callable[[nn.Module, nn.Module], float]


def decode_key(config: object, int8: bool = False) -> str:
    fields = config.to_dict()  # type: ignore[attr-defined]
    digest = config_digest(config)
    weights = " int8" if int8 else ""
    return f"{fields['arch']} d{fields['n_embed']} x{fields['n_blocks']} v{fields['vocab_size']}{weights} {digest}"


def cast_for_decoding(model: nn.Module, device: torch.device, measure_ratio: DecodeRatio,
                      int8: bool = False) -> tuple[nn.Module, Choice[torch.dtype]]:
    """The model to decode with (cast to bf16 where that is measured or known faster) and the choice.

    For an int8 model (`int8`) the cast reaches the activations, norms and embedding; the int8 rows
    stay int8. `measure_ratio` times both copies when the cache has no answer for this machine.
    """
    bf16, fp32 = ("int8 weights, bf16 activations", "int8 weights, fp32 activations") if int8 else (
        "bf16 weights", "fp32 weights")
    if device.type == "cuda":
        if supports_bf16(device):
            return model.to(torch.bfloat16), _chosen(torch.bfloat16, f"{bf16}: this GPU multiplies bf16 natively")
        return model, _chosen(torch.float32, f"{fp32}: this GPU has no bf16")
    if device.type != "cpu":
        return model, _chosen(torch.float32, f"{fp32} on {device.type}")
    feature = native_bf16()
    if feature is None:
        return model, _chosen(torch.float32, f"{fp32}: this CPU has no native bf16 matmul")
    weight_bytes = sum(t.numel() * t.element_size() for t in (*model.parameters(), *model.buffers()))
    if weight_bytes < MIN_MEASURED_BYTES:
        return model, _chosen(torch.float32, f"{fp32}: {weight_bytes / 2**20:.1f} MiB of weights stay in cache, "
                                             f"where decoding is bound by per-token overhead, not bytes")
    key = decode_key(model.config, int8)  # type: ignore[union-attr]
    stored = load_numbers(CACHE_KIND, key, ("ratio",))
    bf16_model = None
    if stored is not None:
        ratio, how = stored["ratio"], "cached"
    else:
        bf16_model = copy.deepcopy(model).to(torch.bfloat16)
        ratio, how = measure_ratio(model, bf16_model), "measured now"
        store_entry(CACHE_KIND, key, {"ratio": ratio})
    measured = {"ratio": ratio}
    if ratio >= DECODE_MARGIN:
        chosen = bf16_model if bf16_model is not None else model.to(torch.bfloat16)
        return chosen, _chosen(torch.bfloat16, f"{bf16}: {feature}, decoding measured {ratio:.2f}x faster than fp32 "
                                               f"({how})", measured, stored is not None)
    return model, _chosen(torch.float32, f"{fp32}: bf16 decoding measured {ratio:.2f}x of fp32 on this {feature} CPU "
                                         f"({how})", measured, stored is not None)


def _chosen(dtype: torch.dtype, reason: str, measured: dict[str, float] | None = None,
            cached: bool = False) -> Choice[torch.dtype]:
    return Choice(CACHE_KIND, dtype, reason, measured, cached)
