"""bf16 weights prepacked for oneDNN: the product of `F.linear`, bit for bit, up to 2x faster for one row.

At batch 1 a bf16 `F.linear` on a CPU reads a plain row-major weight through a general GEMM path:
for `small`'s shapes on an AVX512-BF16 CPU it moved 20-60 GB/s and was most of a decode step.
oneDNN has a faster kernel for the same product when the weight is stored once in its own blocked
layout (`torch.ops.mkldnn._reorder_linear_weight`, what `torch.compile`'s CPU freezing does); the
product is then `torch.ops.mkldnn._linear_pointwise`. One matrix-vector product, 2 threads:

    640 x 384  20.0 -> 13.5 us    2,048 x 384  36.2 -> 19.5 us
    384 x 1,024  24.0 -> 14.8 us  8,192 x 384  113.3 -> 50.1 us

with outputs equal to `F.linear`'s (tests/test_engine.py). The packed weight is a second copy, in a
layout nothing else reads: a snapshot. In tinylm bf16 *weights* exist only in inference copies
(training keeps float32 master weights under autocast, and `decode_precision` casts a copy), so the
snapshot cannot go stale; float32 weights, which a rollout decoder shares with a model being trained,
are packed only for a verifier's several rows, and only an inference copy's (`packed_float.py`).

One row is the exception. PyTorch has its own bf16 matrix-vector kernel (fp32 sums, one rounding:
the same numbers as `F.linear`, bit for bit), but a bf16 `mv` reaches it only while oneDNN is
switched off; otherwise it goes to oneDNN's GEMM. Streaming 80 `small`-shaped matrices from memory
(63M weights, one thread, AMD EPYC with AVX512-BF16) it read 16.7 GB/s, the packed product 12.6 and
the unpacked oneDNN one 7.6; `tinylm generate` at `small` in bf16 went from 203 to 283 tokens/s, the
same tokens. Where that kernel is the faster (measured once per machine, `row_kernel.py`; both give
the same numbers) a product of one row switches oneDNN off for that call (`one_row_product`) and
reads the plain weight; more rows take the packed one.
"""

from __future__ import annotations

import functools
from collections.abc import Callable

import torch

from tinylm.inference.packed_float import onednn_linear_available
from tinylm.inference.row_kernel import bf16_row_kernel


def can_pack(weight: torch.Tensor) -> bool:
    """A bf16 CPU weight, a torch built with the oneDNN linear ops, and a CPU that has oneDNN's bf16 kernels."""
    return weight.dtype == torch.bfloat16 and weight.device.type == "cpu" and cpu_packs_bf16()


@functools.cache
def cpu_packs_bf16() -> bool:
    """oneDNN packs bf16 weights only on CPUs with its bf16 instructions (AVX512-BW/VL/DQ or AVX-NE-CONVERT): an
    AVX2-only CPU (many AMD EPYCs, most laptops) refuses the reorder, and its weights stay plain."""
    if not onednn_linear_available():
        return False
    probe = getattr(torch.ops.mkldnn, "_is_mkldnn_bf16_supported", None)
    return bool(probe()) if probe is not None else True


def packed_linear(weight: torch.Tensor, kernel: str | None = None) -> Callable[[torch.Tensor], torch.Tensor]:
    """x -> F.linear(x, weight) through a copy of `weight` packed for oneDNN (laid out for one row at a time).

    One row goes to `kernel` ("pytorch" or "onednn"; None: the one measured faster here, `row_kernel.py`).
    """
    packed = torch.ops.mkldnn._reorder_linear_weight(weight.detach(), 1)
    in_features = weight.shape[1]
    own_kernel = (kernel or bf16_row_kernel().value) == "pytorch"

    def product(x: torch.Tensor) -> torch.Tensor:
        if own_kernel and x.numel() == in_features:
            return one_row_product(weight, x)
        return torch.ops.mkldnn._linear_pointwise(x, packed, None, "none", [], "")

    return product


def one_row_product(weight: torch.Tensor, x: torch.Tensor) -> torch.Tensor:
    """F.linear(x, weight) for one bf16 row, by PyTorch's own matrix-vector kernel (oneDNN off for the call only)."""
    enabled = torch._C._get_mkldnn_enabled()
    torch._C._set_mkldnn_enabled(False)
    try:
        y = torch.mv(weight, x.reshape(-1))
    finally:
        torch._C._set_mkldnn_enabled(enabled)
    return y.view(*x.shape[:-1], weight.shape[0])
