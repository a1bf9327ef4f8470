"""How fast this model decodes with fp32 weights against bf16 ones: what the decode-precision policy decides on.

The policy (its cache, its threshold, its rule) is `runtime/decode_precision.py`; the runtime never
imports the inference engine, so the timing lives here, next to the engine it runs, and is handed in.
"""

from __future__ import annotations

import torch
from torch import nn

from tinylm.inference.engine import Engine
from tinylm.inference.int8 import Int8Linear
from tinylm.inference.sampling import GREEDY
from tinylm.runtime.choice import Choice
from tinylm.runtime.decode_precision import cast_for_decoding
from tinylm.runtime.measure_cache import Alternated, best_of_alternating

PROBE_TOKENS = 16
PROBE_REPEATS = 4
PROBE_BUDGET_S = 4.0  # no new pair starts after this (past `measure_cache.MIN_PAIRS`)


def is_int8(model: nn.Module) -> bool:
    return any(isinstance(m, Int8Linear) for m in model.modules())


def decode(engine: Engine, new_tokens: int = PROBE_TOKENS) -> None:
    """Greedy cached generation of `new_tokens` after an 8-token prompt, batch 1: the pass that is timed."""
    prompt = [[i % engine.model.config.vocab_size for i in range(1, 9)]]  # type: ignore[union-attr]
    engine.generate(prompt, new_tokens, GREEDY)


def measure_decode_ratio(model: nn.Module, bf16_model: nn.Module) -> Alternated:
    """Best fp32 and bf16 seconds of the same decode, alternating, with the spread of their ratio (fp32 / bf16)."""
    fp32_engine, bf16_engine = Engine(model), Engine(bf16_model)
    return best_of_alternating(lambda: decode(fp32_engine), lambda: decode(bf16_engine), PROBE_REPEATS,
                               PROBE_BUDGET_S)


def cast_measuring_decode(model: nn.Module, device: torch.device) -> tuple[nn.Module, Choice[torch.dtype]]:
    """`cast_for_decoding` with this engine's timing: what `tinylm generate`, `chat` and `bench` decode with."""
    return cast_for_decoding(model, device, measure_decode_ratio, int8=is_int8(model))
