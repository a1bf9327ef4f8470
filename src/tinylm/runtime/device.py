"""Where tensors live and how fast that place can be: device choice, dtype policy, peak FLOP/s.

One module answers three questions every stage asks: which device (`--device auto` tries CUDA, then
Apple MPS, then CPU), which autocast dtype (bf16 where the hardware has fast bf16 matmuls, fp32
elsewhere unless asked), and what the device's peak FLOP/s is, so model FLOP utilization (MFU) can be
reported. GPU peaks come from datasheets (dense, no sparsity); a CPU has no datasheet that tinylm can
trust, so its peak is measured once with a large matmul and cached.
"""

from __future__ import annotations

import functools
import os
import time
from collections.abc import Callable
from contextlib import AbstractContextManager, nullcontext
from typing import TYPE_CHECKING

from tinylm.errors import TinyLMError

if TYPE_CHECKING:
    import torch

DTYPES: tuple[str, ...] = ("auto", "fp32", "bf16", "fp16")

# Dense tensor-core peaks in TFLOP/s from NVIDIA datasheets: (bf16/fp16, tf32); 0 = unknown. Order
# matters: the first substring found in the device name wins, so more specific names come first.
GPU_PEAK_TFLOPS: tuple[tuple[str, float, float], ...] = (
    ("GB200", 2500.0, 1250.0),
    ("B200", 2250.0, 1100.0),
    ("H200 NVL", 835.0, 417.5),
    ("H200", 989.4, 494.7),  # also matches GH200
    ("H100 PCIE", 756.0, 378.0),
    ("H100 NVL", 835.0, 417.5),
    ("H100", 989.4, 494.7),  # SXM (reported as "H100 80GB HBM3")
    ("H800", 989.4, 494.7),
    ("A100", 312.0, 156.0),
    ("A800", 312.0, 156.0),
    ("L40S", 362.05, 183.0),
    ("L40", 181.05, 90.5),
    ("L4", 121.0, 60.0),
    ("A10G", 0.0, 0.0),  # no public datasheet number: unknown rather than wrong
    ("A10", 125.0, 62.5),
    ("RTX 4090", 165.2, 82.6),
    ("RTX 3090", 71.0, 35.6),
    ("V100", 125.0, 0.0),  # fp16 only; no bf16, no tf32
    ("T4", 65.0, 0.0),
)


def pick_device(name: str = "auto") -> torch.device:
    """`auto` = the fastest available device; an explicit name that is not available is a user error."""
    import torch

    if name == "auto":
        if torch.cuda.is_available():
            return torch.device("cuda")
        if getattr(torch.backends, "mps", None) is not None and torch.backends.mps.is_available():
            return torch.device("mps")
        return torch.device("cpu")
    try:
        device = torch.device(name)
    except RuntimeError:
        raise TinyLMError(f"unknown device {name!r}: use auto, cpu, cuda, cuda:N or mps") from None
    if device.type == "cuda" and not torch.cuda.is_available():
        raise TinyLMError(f"device {name!r} asked for but CUDA is not available here (try --device cpu)")
    if device.type == "cuda" and device.index is not None and device.index >= torch.cuda.device_count():
        raise TinyLMError(f"device {name!r} does not exist: this machine has {torch.cuda.device_count()} GPU(s)")
    if device.type == "mps" and not (torch.backends.mps.is_available()):
        raise TinyLMError(f"device {name!r} asked for but Apple MPS is not available here (try --device cpu)")
    return device


def supports_bf16(device: torch.device) -> bool:
    """bf16 is worth using where the matmul units run it natively: Ampere+ GPUs."""
    import torch

    if device.type == "cuda":
        return torch.cuda.is_bf16_supported()
    return False


def resolve_dtype(device: torch.device, requested: str = "auto") -> torch.dtype:
    """The autocast dtype policy: `auto` is bf16 on bf16-capable GPUs, fp32 everywhere else.

    CPU and MPS stay in fp32 by default because bf16 autocast there is often slower and always
    noisier; `--dtype bf16` still asks for it. fp16 needs loss scaling, so it is CUDA only.
    """
    import torch

    if requested not in DTYPES:
        raise TinyLMError(f"unknown dtype {requested!r}: choose one of {', '.join(DTYPES)}")
    if requested == "auto":
        return torch.bfloat16 if supports_bf16(device) else torch.float32
    if requested == "fp16" and device.type != "cuda":
        raise TinyLMError("--dtype fp16 needs a CUDA device (it relies on loss scaling); use bf16 or fp32")
    if requested == "bf16" and device.type == "cuda" and not supports_bf16(device):
        raise TinyLMError("this GPU has no bf16 support; use --dtype fp16 or fp32")
    return {"fp32": torch.float32, "bf16": torch.bfloat16, "fp16": torch.float16}[requested]


def autocast(device: torch.device, dtype: torch.dtype) -> AbstractContextManager[object]:
    """Mixed precision for the forward pass; a no-op for fp32 so CPU runs stay bit-exact."""
    import torch

    if dtype == torch.float32:
        return nullcontext()
    return torch.autocast(device_type=device.type, dtype=dtype)


def configure_backends(device: torch.device) -> None:
    """TF32 matmuls on Ampere+ GPUs: ~8x the fp32 throughput for a precision loss training does not see."""
    import torch

    if device.type == "cuda":
        torch.backends.cuda.matmul.allow_tf32 = True
        torch.backends.cudnn.allow_tf32 = True
        torch.set_float32_matmul_precision("high")


def gpu_peak_from_name(name: str, dtype_name: str = "bf16") -> float | None:
    """Datasheet dense peak FLOP/s for a GPU name as CUDA reports it, or None if unknown."""
    upper = name.upper()
    for key, half, tf32 in GPU_PEAK_TFLOPS:
        if key in upper:
            value = half if dtype_name in ("bf16", "fp16") else tf32
            return value * 1e12 if value > 0 else None
    return None


@functools.lru_cache(maxsize=8)
def measure_cpu_peak_flops(dtype_name: str = "fp32", size: int = 1024, seconds: float = 1.0) -> float:
    """The best FLOP/s of a square matmul on this CPU with the current thread count (measured, cached).

    The best of many runs, because other work on the machine only ever makes a run slower; on a
    machine that stays busy the peak comes out low and MFU high, so CPU MFU is an estimate.
    The matrices grow from 256 up to `size` while one product stays short: a CPU without native bf16
    takes seconds for one 1024-wide bf16 product, and a peak that costs more than the run it
    describes is no use (`matmul_edge`).
    """
    import torch

    dtype = {"fp32": torch.float32, "bf16": torch.bfloat16, "fp16": torch.float16}[dtype_name]
    edge = matmul_edge(lambda n: _time_one_matmul(n, dtype), size, seconds / 20)
    a = torch.randn(edge, edge, generator=torch.Generator().manual_seed(0)).to(dtype)
    b = torch.randn(edge, edge, generator=torch.Generator().manual_seed(1)).to(dtype)
    torch.mm(a, b)  # warm up threads and caches
    best = 0.0
    deadline = time.perf_counter() + seconds
    while True:
        start = time.perf_counter()
        torch.mm(a, b)
        elapsed = time.perf_counter() - start
        best = max(best, 2 * edge**3 / max(elapsed, 1e-9))
        if time.perf_counter() > deadline:
            return best


def matmul_edge(time_one: Callable[[int], float], largest: int, short: float, smallest: int = 256) -> int:
    """The edge to measure at: doubled from `smallest` while one product takes under `short` seconds."""
    edge = min(smallest, largest)
    while edge * 2 <= largest and time_one(edge) < short:
        edge *= 2
    return edge


def _time_one_matmul(edge: int, dtype: torch.dtype) -> float:
    import torch

    a, b = torch.ones(edge, edge, dtype=dtype), torch.ones(edge, edge, dtype=dtype)
    torch.mm(a, b)  # the first product of a shape pays for its setup
    start = time.perf_counter()
    torch.mm(a, b)
    return time.perf_counter() - start


def peak_flops(device: torch.device, dtype: torch.dtype | None = None) -> float | None:
    """Peak FLOP/s to measure MFU against: datasheet for known GPUs, measured for CPU, else None.

    `TINYLM_PEAK_FLOPS` (a number, e.g. 3.12e14) overrides everything, for hardware not in the table.
    """
    import torch

    override = os.environ.get("TINYLM_PEAK_FLOPS")
    if override:
        try:
            return float(override)
        except ValueError:
            raise TinyLMError(f"TINYLM_PEAK_FLOPS={override!r} is not a number") from None
    dtype = dtype or torch.float32
    dtype_name = {torch.bfloat16: "bf16", torch.float16: "fp16"}.get(dtype, "fp32")
    if device.type == "cuda":
        return gpu_peak_from_name(torch.cuda.get_device_name(device), dtype_name)
    if device.type == "cpu":
        return measure_cpu_peak_flops(dtype_name)
    return None


def describe(device: torch.device) -> str:
    """A human name for logs: the GPU model, or the CPU with its thread count."""
    import torch

    if device.type == "cuda":
        return torch.cuda.get_device_name(device)
    if device.type == "cpu":
        return f"cpu ({torch.get_num_threads()} threads)"
    return device.type


def empty_cache(device: torch.device) -> None:
    """Give cached blocks back after an out-of-memory error so the message, not another OOM, comes next."""
    import torch

    if device.type == "cuda":
        torch.cuda.empty_cache()
