"""Which kernel multiplies one bf16 row by a weight matrix on this CPU: measured once, cached.

Two kernels give `F.linear`'s product bit for bit (fp32 sums, one rounding; tests/test_engine.py): oneDNN
on the weight packed in its blocked layout (`packed_bf16.packed_linear`), and PyTorch's own bf16
matrix-vector kernel, reached by `mv` with oneDNN switched off for the call (`packed_bf16.one_row_product`).
Which is faster depends on the CPU: on an AMD EPYC with AVX512-BF16, one thread, streaming 80
`small`-shaped matrices from memory, PyTorch's read 16.7 GB/s and oneDNN's 12.6 (`tinylm generate` at
`small`, bf16: 203 -> ~290 tokens/s); elsewhere oneDNN's may win. So it is timed the way decoding reads
(a pass over 64 MiB of distinct matrices, more than a cache holds), alternating, and PyTorch's kernel is
taken only when it is clearly faster. Since both give the same numbers, the choice changes speed only,
never a token; it is cached per machine all the same, and said in the decode path's line.
"""

from __future__ import annotations

import functools

import torch

from tinylm.runtime.choice import Choice
from tinylm.runtime.measure_cache import (
    best_of_alternating,
    clock,
    load_decision,
    measured_now,
    store_decision,
    verdict,
)

CACHE_KIND = "bf16_row_kernel"
KEY = "one bf16 row x 2048 x 384, 64 MiB streamed"
MARGIN = 1.05  # PyTorch's kernel is kept only this much faster, beyond the spread
NUMBERS = ("ratio", "spread")
VALUES = ("onednn", "pytorch")


def _measure() -> tuple[float, float]:
    """(oneDNN seconds / PyTorch seconds, spread) over one pass of 40 distinct 2048 x 384 bf16 matrices."""
    from tinylm.inference.packed_bf16 import one_row_product, packed_linear  # packed_bf16 imports this module

    g = torch.Generator().manual_seed(0)
    weights = [torch.randn(2048, 384, generator=g).bfloat16() for _ in range(40)]
    packed = [packed_linear(w, kernel="onednn") for w in weights]
    x = torch.randn(1, 384, generator=g).bfloat16()
    timing = best_of_alternating(lambda: [p(x) for p in packed], lambda: [one_row_product(w, x) for w in weights],
                                 repeats=5, budget_s=2.0)
    return timing.ratio, timing.spread


@functools.cache
def bf16_row_kernel() -> Choice[str]:
    """"pytorch" or "onednn" for one bf16 row on this CPU, with the reason."""
    stored = load_decision(CACHE_KIND, KEY, NUMBERS, VALUES)
    if stored is not None:
        return Choice(CACHE_KIND, stored.value, f"{stored.reason} (cached)", stored.numbers, True)
    began = clock()
    ratio, spread = _measure()
    pays = verdict(ratio, spread, MARGIN) == "pays"
    value = "pytorch" if pays else "onednn"
    reason = (f"one bf16 row by {'PyTorch' if pays else 'oneDNN'}'s kernel: PyTorch's measured {ratio:.2f}x "
              f"oneDNN's packed one (±{spread:.2f}; kept above {MARGIN:.2f}x)")
    numbers = {"ratio": ratio, "spread": spread}
    kept = store_decision(CACHE_KIND, KEY, value, reason, numbers)
    return Choice(CACHE_KIND, value, f"{reason} ({measured_now(clock() - began, kept)})", numbers)
