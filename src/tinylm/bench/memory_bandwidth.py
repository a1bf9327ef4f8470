"""How fast this device reads memory: the ceiling of batch-1 decoding once the weights leave the cache.

Generating one token at batch 1 reads every weight once and does two FLOPs per weight read, far too
few to keep the multipliers busy: past the size of the last-level cache, tokens/s can be at most
(bytes read per second) / (bytes of weights). `read_bandwidth` measures the first number the way
decoding reads (a streaming reduction over a buffer several times larger than any cache), so
`tinylm bench --only decode` can say how close a decoder is to that roofline, not only how it
compares with another implementation that may be as far from it.
"""

from __future__ import annotations

import torch
from torch import nn

from tinylm.bench.timing import Measurement, rate
from tinylm.inference.int8 import Int8Linear


def read_bandwidth(device: torch.device, megabytes: int = 512, repeats: int = 5) -> float:
    """Best bytes/s of summing a `megabytes` fp32 buffer on `device` (read once per call)."""
    n = megabytes * (1 << 20) // 4
    buffer = torch.ones(n, dtype=torch.float32, device=device)
    buffer.sum()  # warm-up: pages touched, thread pool up
    return Measurement([rate(lambda: buffer.sum(), float(buffer.numel() * 4), device, iterations=3)
                        for _ in range(repeats)]).high


def weight_bytes(model: nn.Module) -> int:
    """Bytes of the weights one decoding step reads (`parameters()` yields a tied head once).

    int8 layers keep their rows and scales as buffers (`inference/int8.py`); they are read too.
    """
    int8 = sum(t.numel() * t.element_size() for m in model.modules() if isinstance(m, Int8Linear)
               for t in (m.qweight, m.scale))
    return int8 + sum(p.numel() * p.element_size() for p in model.parameters())
