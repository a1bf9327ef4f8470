"""How fast this model decodes with fp32 weights against bf16 ones: what the decode-precision policy decides on.

The policy (its cache, its threshold, its rule) is `runtime/decode_precision.py`; the runtime never
imports the inference engine, so the timing lives here, next to the engine it runs, and is handed in.
"""

from __future__ import annotations

import time

import torch
from torch import nn

from tinylm.inference.engine import Engine
from tinylm.inference.int8 import Int8Linear
from tinylm.inference.sampling import GREEDY
from tinylm.runtime.choice import Choice
from tinylm.runtime.decode_precision import cast_for_decoding

PROBE_TOKENS = 16
PROBE_REPEATS = 3


def is_int8(model: nn.Module) -> bool:
    return any(isinstance(m, Int8Linear) for m in model.modules())


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


def cast_measuring_decode(model: nn.Module, device: torch.device) -> tuple[nn.Module, Choice[torch.dtype]]:
    """`cast_for_decoding` with this engine's timing: what `tinylm generate`, `chat` and `bench` decode with."""
    return cast_for_decoding(model, device, measure_decode_ratio, int8=is_int8(model))
