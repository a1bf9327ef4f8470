"""Float32 weight products for the decoder, with one row computed as a matrix-vector product.

The `tinylm` command runs MKL in its strict reproducible mode (`MKL_CBWR=AUTO,STRICT`,
`runtime/mkl_cbwr.py`). In that mode MKL's GEMM is much slower for a single row: on an Intel Xeon
with AVX-512, one thread, `tiny`'s shapes, the lm_head 4,096 x 128 took 75 us against 44 us
without it, and the MLP's 704 x 128 11.3 against 6.4 us. MKL's GEMV is not slowed (43 and 6.7 us).
A decode step at batch 1 is nothing but single-row products, so the strict mode cost `tinylm
generate` about a quarter of its tokens per second, and the server's one stream as much. Here a
product whose input holds one row goes through `torch.mv` / `torch.addmv`, and a product of more
rows through GEMM as before. Both are the same sums up to float32 rounding.
(`benchmarks/bench_decode.py` prints the tokens/s; tests/test_fast_decode.py the agreement.)

Which way the weight lies in memory matters as much once it no longer fits in cache. Stored
column-major (the [in, out] matrix contiguous, W its transposed view), one thread's `mv` streamed
14.4 GB/s from memory where the row-major one did 11.2, on an AMD EPYC (80 distinct `small`-shaped
matrices, 63M weights, read in turn); `tinylm generate` at `small` went from 134 to 173 tokens/s,
the same greedy tokens. A model that only decodes (`load_for_generation`'s copies, whose weights
need no gradient) therefore has its float32 projections laid out column-major by the fast decoder:
the same tensor values, the model's own parameters become views of that storage, so nothing is
held twice, except a tied head: the embedding table is read by rows, so the head gets a column-major
copy of it (the largest matrix: 8,192 x 384 at `small`, 540-570 against 233-247 us a product, one thread).
A model being trained keeps its layout (its optimizer updates the tensors it has).
"""

from __future__ import annotations

from collections.abc import Callable

import torch
import torch.nn.functional as F

Projection = Callable[[torch.Tensor], torch.Tensor]
ResidualProjection = Callable[[torch.Tensor, torch.Tensor], torch.Tensor]  # (x, y) -> x + W y


def decodes_only(weight: torch.Tensor) -> bool:
    """A float32 CPU weight that needs no gradient: an inference copy, free to be laid out for decoding."""
    return weight.dtype == torch.float32 and weight.device.type == "cpu" and not weight.requires_grad


def column_major(weight: torch.Tensor) -> torch.Tensor:
    """`weight` [out, in] with the same values, stored as its contiguous transpose [in, out] (strides (1, out))."""
    return weight.t().contiguous().t()


def float_product(weight: torch.Tensor) -> Projection:
    """x [..., in] -> x W^T, where `weight` [out, in] is float32 (the model's own tensor, updated in place)."""
    out_features, in_features = weight.shape

    def product(x: torch.Tensor) -> torch.Tensor:
        if x.numel() == in_features:
            return torch.mv(weight, x.reshape(in_features)).view(*x.shape[:-1], out_features)
        return F.linear(x, weight)

    return product


def float_residual_product(weight: torch.Tensor) -> ResidualProjection:
    """(x [N, out], y [N, in]) -> x + y W^T as one call, x as the accumulator (`addmv` for one row, else `addmm`)."""
    transposed = weight.t()  # a view, taken once

    def residual(x: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
        if x.shape[0] == 1:
            return torch.addmv(x[0], weight, y[0]).unsqueeze(0)
        return torch.addmm(x, y, transposed)

    return residual
