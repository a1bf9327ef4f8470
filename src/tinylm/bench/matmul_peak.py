"""The device's matmul peak: what one large square GEMM reaches, the ceiling MFU is measured against.

On a CPU this is `tinylm.runtime.device.measure_cpu_peak_flops` (the same number `tinylm train` divides
by). On a GPU the datasheet says what the tensor cores can do (`device.peak_flops`), and this
module also measures what they do here, since clocks, power limits and the library set the real
ceiling; `tinylm bench` reports both.
"""

from __future__ import annotations

import torch

from tinylm.bench.timing import Measurement, rate
from tinylm.runtime.device import measure_cpu_peak_flops

DTYPE_NAMES = {torch.float32: "fp32", torch.bfloat16: "bf16", torch.float16: "fp16"}


def matmul_peak_flops(device: torch.device, dtype: torch.dtype, size: int | None = None, repeats: int = 5,
                      seconds: float = 2.0) -> float:
    """Best FLOP/s of `size` x `size` matmuls in `dtype` on `device`.

    On a CPU: the shared measurement, given `seconds` rather than its quick default, because on a
    busy machine the best of a longer window is far more likely to catch the real ceiling.
    """
    if device.type == "cpu":
        return measure_cpu_peak_flops(DTYPE_NAMES[dtype], size or 1024, seconds)
    size = size or 8192  # GPUs need big tiles to fill every SM
    g = torch.Generator(device=device).manual_seed(0)
    a = torch.randn(size, size, device=device, dtype=dtype, generator=g)
    b = torch.randn(size, size, device=device, dtype=dtype, generator=g)
    flops = 2.0 * size**3
    torch.mm(a, b)  # warm-up: cuBLAS picks its kernel
    return Measurement([rate(lambda: torch.mm(a, b), flops, device, iterations=10) for _ in range(repeats)]).high
