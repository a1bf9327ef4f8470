"""The decoder's float32 products: one row as a matrix-vector product, more rows as before (row_products.py).

Under the `tinylm` command's strict MKL mode a one-row GEMM is up to 1.7x slower than a GEMV, so the
path a product takes is what these tests pin (the ops dispatched), beside its value: the same sums as
`F.linear` / `addmm` up to float32 rounding, and exactly those calls for several rows.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch.utils._python_dispatch import TorchDispatchMode

from tinylm.inference.row_products import float_product, float_residual_product


class _Ops(TorchDispatchMode):
    """Records the name of every aten op dispatched inside it."""

    def __init__(self) -> None:
        super().__init__()
        self.names: list[str] = []

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        self.names.append(func.overloadpacket.__name__)
        return func(*args, **(kwargs or {}))


def _ops(fn, *args: torch.Tensor) -> tuple[torch.Tensor, list[str]]:
    with _Ops() as ops:
        out = fn(*args)
    return out, ops.names


def test_one_row_is_a_matrix_vector_product_with_the_linears_value() -> None:
    g = torch.Generator().manual_seed(0)
    weight = torch.randn(96, 40, generator=g)
    product = float_product(weight)
    for x in (torch.randn(1, 40, generator=g), torch.randn(1, 1, 40, generator=g)):
        got, names = _ops(product, x)
        assert "mv" in names and not {"mm", "addmm", "linear"} & set(names)
        assert got.shape == (*x.shape[:-1], 96)
        torch.testing.assert_close(got, F.linear(x, weight), atol=1e-5, rtol=1e-5)


def test_several_rows_are_the_linear_itself() -> None:
    g = torch.Generator().manual_seed(1)
    weight, x = torch.randn(96, 40, generator=g), torch.randn(3, 2, 40, generator=g)
    got, names = _ops(float_product(weight), x)
    assert "mv" not in names
    assert torch.equal(got, F.linear(x, weight))


def test_the_residual_product_adds_into_x_by_addmv_for_one_row_and_addmm_for_more() -> None:
    g = torch.Generator().manual_seed(2)
    weight = torch.randn(24, 56, generator=g)
    residual = float_residual_product(weight)
    x, y = torch.randn(1, 24, generator=g), torch.randn(1, 56, generator=g)
    got, names = _ops(residual, x, y)
    assert "addmv" in names and "addmm" not in names
    torch.testing.assert_close(got, x + y @ weight.T, atol=1e-5, rtol=1e-5)
    x, y = torch.randn(5, 24, generator=g), torch.randn(5, 56, generator=g)
    got, names = _ops(residual, x, y)
    assert "addmm" in names and torch.equal(got, torch.addmm(x, y, weight.t()))


def test_a_weight_updated_in_place_is_what_the_next_product_reads() -> None:
    """A rollout decoder shares the trained model's weights: the product holds the tensor, not a copy."""
    weight, x = torch.ones(4, 3), torch.ones(1, 3)
    product, residual = float_product(weight), float_residual_product(weight)
    with torch.no_grad():
        weight.mul_(2.0)
    assert torch.equal(product(x), torch.full((1, 4), 6.0))
    assert torch.equal(residual(torch.zeros(1, 4), x), torch.full((1, 4), 6.0))
