"""Causal attention alone, forward + backward: SDPA (as the attention layer calls it) against the blockwise kernel.

    .venv/bin/python benchmarks/bench_attention.py --threads 2 [--repeats 10] [--no-compile]

At the attention shapes of `tiny` (16 x 4 heads x 256 x 32, 2 key/value heads) and `small`
(8 x 6 x 512 x 64, 2 key/value heads), in float32 and bf16, eager and `torch.compile`d, the two
kernels interleaved in the same run. Prints one JSON object per shape and dtype: calls/s of each
(median, spread) and their ratio. docs/modern/blockwise-attention.md quotes it.
"""

from __future__ import annotations

import argparse
import json

import torch
import torch.nn.functional as F

from tinylm.bench.timing import interleaved, ratio
from tinylm.models.modern.blockwise_attention import blockwise_causal_attention

SHAPES = {"tiny": (16, 4, 2, 256, 32), "small": (8, 6, 2, 512, 64)}  # batch, heads, kv heads, length, head dim


def sdpa(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor) -> torch.Tensor:
    """What `Attention.forward` runs on its SDPA path: grouped heads repeated, then the fused kernel."""
    group = q.shape[1] // k.shape[1]
    return F.scaled_dot_product_attention(q, k.repeat_interleave(group, 1), v.repeat_interleave(group, 1),
                                          is_causal=True)


def measure(shape: tuple[int, ...], dtype: torch.dtype, compiled: bool, repeats: int) -> dict[str, object]:
    B, H, K, T, D = shape
    g = torch.Generator().manual_seed(0)
    q = torch.randn(B, H, T, D, generator=g).to(dtype).requires_grad_()
    k, v = (torch.randn(B, K, T, D, generator=g).to(dtype).requires_grad_() for _ in range(2))
    kernels = {"sdpa": sdpa, "blockwise": blockwise_causal_attention}
    if compiled:
        kernels = {name: torch.compile(fn, dynamic=False) for name, fn in kernels.items()}

    def step(fn):
        return lambda: fn(q, k, v).sum().backward()

    measured = interleaved({name: (step(fn), 1) for name, fn in kernels.items()}, torch.device("cpu"), repeats,
                           warmup=2)
    return {"sdpa_calls_per_s": measured["sdpa"].to_dict(), "blockwise_calls_per_s": measured["blockwise"].to_dict(),
            "sdpa_ms": 1e3 / measured["sdpa"].median, "blockwise_ms": 1e3 / measured["blockwise"].median,
            "blockwise_over_sdpa": ratio(measured["blockwise"], measured["sdpa"])}


def main() -> None:
    parser = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    parser.add_argument("--repeats", type=int, default=10)
    parser.add_argument("--threads", type=int, default=None)
    parser.add_argument("--no-compile", dest="compile", action="store_false")
    args = parser.parse_args()
    if args.threads:
        torch.set_num_threads(args.threads)
    for preset, shape in SHAPES.items():
        for dtype in (torch.float32, torch.bfloat16):
            for compiled in (False, True) if args.compile else (False,):
                result = measure(shape, dtype, compiled, args.repeats)
                print(json.dumps({"preset": preset, "shape": shape, "dtype": str(dtype).removeprefix("torch."),
                                  "compiled": compiled, "threads": torch.get_num_threads(), **result}), flush=True)


if __name__ == "__main__":
    main()
