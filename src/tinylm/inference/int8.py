"""Weight-only int8 for Linear layers: a quarter of the weight memory, logits within a tested tolerance.

Each output channel (row) of a weight W [out, in] gets its own scale s = max|W_row| / 127, and the
row is stored as round(W_row / s) in int8 (symmetric: zero stays exactly zero, no offset). Because
the scale belongs to an output channel, it factors out of the matrix product:

    x @ W.T = x @ (q * s[:, None]).T = (x @ q.T) * s

so the layer multiplies by the int8 matrix and scales the result: no full-precision copy of the
weight is ever kept. The rounding error per weight is at most s / 2, i.e. 1/254 of the row's largest
magnitude. Activations stay in float ("weight-only"), which is what keeps the quality loss small.
Embeddings are left alone; a tied lm_head (the modern default) is the embedding and stays in full
precision too.

How the product runs. With bf16 (or fp16) activations on a CPU, PyTorch's own weight-only int8
kernel `torch._weight_int8pack_mm` reads the int8 rows and applies the scales itself: at batch 1 on
an AVX512-BF16 CPU it measured 3-5x faster than a bf16 `F.linear` of the same shape (half the bytes,
and a kernel written for this case). Otherwise (float32 activations, or another device) the int8
matrix is converted to the activation dtype on the fly, which costs time: there int8 is a memory
saving first. `load_for_generation` picks the activation dtype by measuring both
(`decode_precision.cast_for_decoding`).
"""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import nn

# torch's weight-only int8 CPU kernel (x [M, K] @ (int8 [N, K] * scale [N]).T); fast for half-precision x
HAS_PACKED_KERNEL = hasattr(torch, "_weight_int8pack_mm")
PACKED_KERNEL_DTYPES = (torch.bfloat16, torch.float16)


def quantize_rows(weight: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """(int8 weight [out, in], float32 scale [out]) with weight ~= q * scale[:, None]."""
    w = weight.detach().float()
    scale = w.abs().amax(dim=1).clamp(min=1e-12) / 127.0
    q = torch.round(w / scale[:, None]).clamp(-127, 127).to(torch.int8)
    return q, scale


class Int8Linear(nn.Module):
    """A drop-in replacement for `nn.Linear` holding an int8 weight and one scale per output channel."""

    def __init__(self, qweight: torch.Tensor, scale: torch.Tensor, bias: torch.Tensor | None) -> None:
        super().__init__()
        self.in_features, self.out_features = qweight.shape[1], qweight.shape[0]
        self.register_buffer("qweight", qweight)
        self.register_buffer("scale", scale)
        self.bias = None if bias is None else nn.Parameter(bias.detach().clone(), requires_grad=False)

    @classmethod
    def from_linear(cls, linear: nn.Linear) -> Int8Linear:
        q, scale = quantize_rows(linear.weight)
        return cls(q.to(linear.weight.device), scale.to(linear.weight.device), linear.bias)

    def dequantized(self) -> torch.Tensor:
        return self.qweight.float() * self.scale[:, None]

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        if x.device.type == "cpu" and x.dtype in PACKED_KERNEL_DTYPES and HAS_PACKED_KERNEL:
            rows = x.reshape(-1, self.in_features)
            y = torch._weight_int8pack_mm(rows, self.qweight, self.scale.to(x.dtype))
            y = y.view(*x.shape[:-1], self.out_features)
        else:
            y = F.linear(x, self.qweight.to(x.dtype)) * self.scale.to(x.dtype)
        return y if self.bias is None else y + self.bias.to(x.dtype)

    def extra_repr(self) -> str:
        return f"in_features={self.in_features}, out_features={self.out_features}, int8 per-channel"


def quantize_int8(model: nn.Module) -> nn.Module:
    """Replace every `nn.Linear` of `model` (in place) by an `Int8Linear`, except one sharing the embedding.

    Returns the model. Meant for inference: the int8 weights are not trainable.
    """
    embedding_weights = {id(m.weight) for m in model.modules() if isinstance(m, nn.Embedding)}
    for parent in list(model.modules()):
        for name, child in list(parent.named_children()):
            if isinstance(child, nn.Linear) and id(child.weight) not in embedding_weights:
                setattr(parent, name, Int8Linear.from_linear(child))
    return model


def linear_weight_bytes(model: nn.Module) -> int:
    """Bytes held by the weights (and int8 scales) of the linear layers that are not an embedding."""
    embedding_weights = {id(m.weight) for m in model.modules() if isinstance(m, nn.Embedding)}
    total = 0
    for module in model.modules():
        if isinstance(module, Int8Linear):
            total += module.qweight.numel() * module.qweight.element_size()
            total += module.scale.numel() * module.scale.element_size()
        elif isinstance(module, nn.Linear) and id(module.weight) not in embedding_weights:
            total += module.weight.numel() * module.weight.element_size()
    return total
