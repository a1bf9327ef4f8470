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
"""

from __future__ import annotations

import copy
import time

import torch
from torch import nn

from tinylm.inference.engine import Engine
from tinylm.inference.sampling import GREEDY
from tinylm.runtime.measure_cache import config_digest, load_numbers, store_entry
from tinylm.runtime.precision import native_bf16

CACHE_KIND = "decode_precision"
DECODE_MARGIN = 1.1
# below this, weights stay in cache and bf16 only adds casts: the `tiny` preset (5 MiB) measured 0.6x
# of fp32 on an AVX512-BF16 CPU while `small` (56 MiB) measured 1.9x; smaller models are not measured
MIN_MEASURED_BYTES = 2 * 2**20
PROBE_TOKENS = 16
PROBE_REPEATS = 3


def is_int8(model: nn.Module) -> bool:
    from tinylm.inference.int8 import Int8Linear

    return any(isinstance(m, Int8Linear) for m in model.modules())


def decode_key(config: object, int8: bool = False) -> str:
    fields = config.to_dict()  # type: ignore[attr-defined]
    digest = config_digest(config)
    weights = " int8" if int8 else ""
    return f"{fields['arch']} d{fields['n_embed']} x{fields['n_blocks']} v{fields['vocab_size']}{weights} {digest}"


def decode_seconds(engine: Engine, new_tokens: int = PROBE_TOKENS) -> float:
    """Seconds for greedy cached generation of `new_tokens` after an 8-token prompt, batch 1."""
    prompt = [[i % engine.model.config.vocab_size for i in range(1, 9)]]  # type: ignore[union-attr]
    start = time.perf_counter()
    engine.generate(prompt, new_tokens, GREEDY)
    return time.perf_counter() - start


def measure_decode_ratio(model: nn.Module, bf16_model: nn.Module) -> float:
    """fp32 seconds / bf16 seconds of the same decode, best of `PROBE_REPEATS` alternating runs each."""
    fp32_engine, bf16_engine = Engine(model), Engine(bf16_model)
    decode_seconds(fp32_engine, 4), decode_seconds(bf16_engine, 4)  # warm-up: weights fused, kernels chosen
    fp32, bf16 = [], []
    for _ in range(PROBE_REPEATS):
        fp32.append(decode_seconds(fp32_engine))
        bf16.append(decode_seconds(bf16_engine))
    return min(fp32) / min(bf16)


def cast_for_decoding(model: nn.Module, device: torch.device) -> tuple[nn.Module, str]:
    """The model to decode with (cast to bf16 where that is measured or known faster) and why.

    For an int8 model the cast reaches the activations, norms and embedding; the int8 rows stay int8.
    """
    from tinylm.runtime.device import supports_bf16

    int8 = is_int8(model)
    bf16, fp32 = ("int8 weights, bf16 activations", "int8 weights, fp32 activations") if int8 else (
        "bf16 weights", "fp32 weights")
    if device.type == "cuda":
        if supports_bf16(device):
            return model.to(torch.bfloat16), f"{bf16}: this GPU multiplies bf16 natively"
        return model, f"{fp32}: this GPU has no bf16"
    if device.type != "cpu":
        return model, f"{fp32} on {device.type}"
    feature = native_bf16()
    if feature is None:
        return model, f"{fp32}: this CPU has no native bf16 matmul"
    weight_bytes = sum(t.numel() * t.element_size() for t in (*model.parameters(), *model.buffers()))
    if weight_bytes < MIN_MEASURED_BYTES:
        return model, (f"{fp32}: {weight_bytes / 2**20:.1f} MiB of weights stay in cache, where decoding is "
                       f"bound by per-token overhead, not bytes")
    key = decode_key(model.config, int8)  # type: ignore[union-attr]
    stored = load_numbers(CACHE_KIND, key, ("ratio",))
    bf16_model = None
    if stored is not None:
        ratio, how = stored["ratio"], "cached"
    else:
        bf16_model = copy.deepcopy(model).to(torch.bfloat16)
        ratio, how = measure_decode_ratio(model, bf16_model), "measured now"
        store_entry(CACHE_KIND, key, {"ratio": ratio})
    if ratio >= DECODE_MARGIN:
        chosen = bf16_model if bf16_model is not None else model.to(torch.bfloat16)
        return chosen, f"{bf16}: {feature}, decoding measured {ratio:.2f}x faster than fp32 ({how})"
    return model, f"{fp32}: bf16 decoding measured {ratio:.2f}x of fp32 on this {feature} CPU ({how})"
