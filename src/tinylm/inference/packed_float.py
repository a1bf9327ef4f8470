"""Float32 weights packed for oneDNN, for a decoder that multiplies a few rows at a time: the verifier.

Speculative decoding's target scores the k drafted tokens and the one before them in one pass, k + 1
rows, and that pass is what a round costs. A few rows should cost what one does: the weights are read
once either way, and at batch 1 reading them is the step. MKL's GEMM (what `F.linear` calls for
float32) does not do that for few rows. Streaming 40 distinct 2,048 x 384 float32 matrices (126 MB,
more than a cache holds), one thread, an AMD EPYC, microseconds per matrix:

    rows                                    1      2      3      5      8
    MKL, column-major weight (F.linear)   153    217    279    496    479
    MKL, row-major weight, W @ x^T        331    159    225    286    373
    oneDNN, packed for 5 rows             227    253    194    168    238

oneDNN's product on a weight stored once in its own blocked layout (`_reorder_linear_weight`, told
how many rows to expect) reads five rows for 10% more than MKL's matrix-vector product reads one.
At `small` (float32, one thread) a verifier pass of 5 tokens fell from 12.2 ms, 2.1x a one-token step
(5.8 ms), to 6.1 ms, 1.06x.

It is a second copy of the weights, in a layout nothing else reads, made when the decoder is built:
only a decoder asked for several rows a call (`FastDecoder(rows_per_call > 1)`) makes one, and only
of an inference copy (`decodes_only`: no gradient), whose weights tinylm never updates: a decoder is
built after the weights it reads are final, and one built before an in-place change (a `load_state_dict`
into the same model) would go on reading the old copy, so build a new one.
Every call goes through it, one row too (a verifier pass with no drafts left): which kernel runs
then never depends on a measurement, so the same command gives the same numbers.
"""

from __future__ import annotations

import functools

import torch

from tinylm.inference.row_products import Projection, decodes_only


@functools.cache
def onednn_linear_available() -> bool:
    """This torch was built with oneDNN and its linear ops (`_reorder_linear_weight`, `_linear_pointwise`)."""
    return (torch.backends.mkldnn.is_available() and hasattr(torch.ops.mkldnn, "_linear_pointwise")
            and hasattr(torch.ops.mkldnn, "_reorder_linear_weight"))


def can_pack_float(weight: torch.Tensor, rows: int) -> bool:
    """Several rows a call, a float32 CPU inference weight (no gradient) and oneDNN's linear ops to pack it for."""
    return rows > 1 and decodes_only(weight) and onednn_linear_available()


def packed_float_product(weight: torch.Tensor, rows: int) -> Projection:
    """x [..., in] -> x W^T through a copy of `weight` [out, in] packed by oneDNN for `rows` rows a call."""
    packed = torch.ops.mkldnn._reorder_linear_weight(weight.detach().contiguous(), rows)

    def product(x: torch.Tensor) -> torch.Tensor:
        return torch.ops.mkldnn._linear_pointwise(x, packed, None, "none", [], "")

    return product
