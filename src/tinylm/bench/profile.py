"""Where a training step's time goes: `torch.profiler` over a few steps, grouped into a short table.

`tinylm bench --profile` prints it for tinylm and for the reference side by side. The groups
(matmul, attention, loss, norm, optimizer, elementwise, other) are what one acts on: a GEMM share
near the top means the step is as fast as the hardware allows, a large elementwise or "other"
share means time spent outside the math that matters.
"""

from __future__ import annotations

from collections.abc import Callable

import torch
from torch.profiler import ProfilerActivity, profile

# first matching substring wins; names are aten ops and their autograd backward nodes
GROUPS: tuple[tuple[str, tuple[str, ...]], ...] = (
    ("loss", ("cross_entropy", "nll_loss", "log_softmax", "logsumexp", "chunkedlinearcrossentropy")),
    ("attention", ("scaled_dot_product", "flash", "efficient_attention", "softmax")),
    ("matmul", ("addmm", "mm", "bmm", "matmul", "linear")),
    ("optimizer", ("foreach", "adam", "clip_grad", "_fused", "norm_")),
    ("norm", ("rms_norm", "layer_norm", "rsqrt")),
    ("embedding", ("embedding",)),
)


def group_of(op_name: str) -> str:
    name = op_name.lower()
    for group, keys in GROUPS:
        if any(key in name for key in keys):
            return group
    if name.startswith("aten::"):
        return "elementwise/other aten"
    return "other"


def profile_step(step: Callable[[], None], steps: int = 3, top: int = 12) -> dict[str, object]:
    """Self time per op over `steps` steps: {"groups": {group: share}, "top_ops": [(op, share)], "total_ms"}."""
    step()  # warm-up outside the trace
    activities = [ProfilerActivity.CPU] + ([ProfilerActivity.CUDA] if torch.cuda.is_available() else [])
    with profile(activities=activities) as prof:
        for _ in range(steps):
            step()
    use_cuda = torch.cuda.is_available()
    rows = []
    for event in prof.key_averages():
        self_us = event.self_device_time_total if use_cuda else event.self_cpu_time_total
        if self_us > 0:
            rows.append((event.key, self_us))
    total = sum(us for _, us in rows) or 1.0
    groups: dict[str, float] = {}
    for key, us in rows:
        groups[group_of(key)] = groups.get(group_of(key), 0.0) + us / total
    rows.sort(key=lambda r: -r[1])
    return {"total_ms_per_step": total / 1000 / steps,
            "groups": dict(sorted(groups.items(), key=lambda kv: -kv[1])),
            "top_ops": [(key, us / total) for key, us in rows[:top]]}


def format_profile(name: str, result: dict[str, object]) -> str:
    lines = [f"{name}: {result['total_ms_per_step']:.1f} ms of op time per step"]
    lines += [f"  {group:<24} {share:6.1%}" for group, share in result["groups"].items()]  # type: ignore[union-attr]
    lines.append("  top ops (self time):")
    lines += [f"    {op:<40} {share:6.1%}" for op, share in result["top_ops"]]  # type: ignore[union-attr]
    return "\n".join(lines)
