"""bf16 weights for decoding where this machine decodes faster with them, fp32 elsewhere.

Decoding reads every weight once per new token, so it is bound by memory traffic, and bf16 halves
the bytes. On a GPU with bf16 that is always a win. On a CPU it depends: the weights of a small model
sit in cache, where the casts and bf16 kernels can cost more than the bytes saved, and only CPUs with
native bf16 dot products (AMX-BF16, AVX512-BF16, Arm BF16) have fast bf16 kernels at all. So on a CPU
the two are measured: greedy cached decoding of this model with fp32 and with bf16 weights,
alternating, best of a few; bf16 is kept only if it is `DECODE_MARGIN` faster by more than the
spread of the repeats (a close call stays fp32). The decision is cached per machine and model shape,
busy machine or not, so a second run decodes as the first did. Models small enough to stay in cache
are not measured: they are bound by per-token overhead, which bf16 does not shrink.

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

from tinylm.runtime.choice import Choice, plain
from tinylm.runtime.device import supports_bf16
from tinylm.runtime.measure_cache import (
    Alternated,
    clock,
    config_digest,
    load_decision,
    measured_now,
    store_decision,
    verdict,
)
from tinylm.runtime.precision import native_bf16

CACHE_KIND = "decode_precision"
DECODE_MARGIN = 1.1
# below this, weights stay in cache and bf16 only adds casts: the `tiny` preset (5 MiB) measured 0.6x
# of fp32 on an AVX512-BF16 CPU while `small` (56 MiB) measured 1.9x; smaller models are not measured
MIN_MEASURED_BYTES = 2 * 2**20

NUMBERS = ("ratio", "spread")  # what a cached decision was taken on

# (fp32 model, bf16 copy) -> best fp32 and bf16 seconds of the same decode (`measure_cache.best_of_alternating`)
DecodeRatio = Callable[[nn.Module, nn.Module], Alternated]


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
    stored = load_decision(CACHE_KIND, key, NUMBERS, ("float32", "bfloat16"))
    if stored is not None:
        dtype = getattr(torch, stored.value)
        chosen = model.to(torch.bfloat16) if dtype == torch.bfloat16 else model
        return chosen, _chosen(dtype, f"{stored.reason} (cached)", stored.numbers, True)
    bf16_model = copy.deepcopy(model).to(torch.bfloat16)
    began = clock()
    timing = measure_ratio(model, bf16_model)
    measured = {"ratio": timing.ratio, "spread": timing.spread}
    dtype, reason = decide(timing, feature, bf16, fp32)
    kept = store_decision(CACHE_KIND, key, plain(dtype), reason, measured)
    how = measured_now(clock() - began, kept)
    return (bf16_model if dtype == torch.bfloat16 else model), _chosen(dtype, f"{reason} ({how})", measured)


def decide(timing: Alternated, feature: str, bf16: str, fp32: str) -> tuple[torch.dtype, str]:
    """bf16 only where decoding clears `DECODE_MARGIN` by more than its spread; the reason without "how"."""
    ratio, spread = timing.ratio, timing.spread
    found = verdict(ratio, spread, DECODE_MARGIN)
    if found == "pays":
        return torch.bfloat16, f"{bf16}: {feature}, decoding measured {ratio:.2f}x faster than fp32, ±{spread:.2f}"
    measured = f"{fp32}: bf16 decoding measured {ratio:.2f}x of fp32 on this {feature} CPU"
    if found == "noise":
        return torch.float32, f"{measured}, within the noise (±{spread:.2f}) of the {DECODE_MARGIN:.2f}x that pays"
    return torch.float32, measured


def _chosen(dtype: torch.dtype, reason: str, measured: dict[str, float] | None = None,
            cached: bool = False) -> Choice[torch.dtype]:
    return Choice(CACHE_KIND, dtype, reason, measured, cached)
