"""What LoRA saves in training: trainable parameters, gradient and optimizer memory, peak memory, step time.

Prints one JSON object with one entry per configuration (full fine-tuning, then LoRA variants) on
a preset (default `tiny`, CPU, random weights and tokens; memory does not depend on their values).
Each configuration runs in its own Python process, so its peak resident memory (`ru_maxrss`) is its
own: `peak_rss_mb` is that peak, `training_rss_mb` the growth over the process right before the
first step (activations, gradients, optimizer state). `grad_and_optimizer_mb` is counted from the
live tensors after training (every `.grad` and every AdamW state tensor), so it is exact and
independent of the allocator. Step time is the median over the timed steps.

    python benchmarks/bench_lora_memory.py [--preset tiny] [--batch 8] [--seq 128] [--steps 8]
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import resource
import statistics
import subprocess
import sys
import time

import torch

from tinylm.models.factory import build_model
from tinylm.models.lora import LoraConfig, apply_lora, count_trainable
from tinylm.presets import preset_config

CONFIGURATIONS: dict[str, dict | None] = {
    "full": None,
    "lora_r8_attn_mlp": dict(rank=8),
    "lora_r8_q_v": dict(rank=8, targets=["q", "v"]),
    "lora_r64_all_linear": dict(rank=64, targets="all-linear"),
}


def _maxrss_mb() -> float:
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024  # KiB on Linux


def _tensor_mb(tensors) -> float:
    return sum(t.numel() * t.element_size() for t in tensors) / 2**20


def measure_one(preset: str, lora: dict | None, batch: int, seq: int, steps: int, warmup: int = 2) -> dict:
    """Train `warmup + steps` AdamW steps in this process and report its memory and speed."""
    torch.manual_seed(0)
    torch.set_num_threads(1)
    model = build_model(preset_config(preset))
    if lora is not None:
        apply_lora(model, LoraConfig.from_dict(lora))
    model.train()
    trainable = [p for p in model.parameters() if p.requires_grad]
    optimizer = torch.optim.AdamW(trainable, lr=1e-4)
    idx = torch.randint(0, model.config.vocab_size, (batch, seq + 1))
    inputs, targets = idx[:, :-1], idx[:, 1:]
    before = _maxrss_mb()
    times = []
    for step in range(warmup + steps):
        start = time.perf_counter()
        optimizer.zero_grad(set_to_none=True)
        _, loss = model(inputs, targets, return_logits=False)
        loss.backward()
        optimizer.step()
        if step >= warmup:
            times.append(time.perf_counter() - start)
    state = [t for s in optimizer.state.values() for t in s.values() if torch.is_tensor(t) and t.dim() > 0]
    return {
        "total_params": sum(p.numel() for p in model.parameters()),
        "trainable_params": count_trainable(model),
        "grad_and_optimizer_mb": round(_tensor_mb([p.grad for p in trainable if p.grad is not None]) +
                                       _tensor_mb(state), 3),
        "peak_rss_mb": round(_maxrss_mb(), 1),
        "training_rss_mb": round(_maxrss_mb() - before, 1),
        "step_ms": round(1000 * statistics.median(times), 2),
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--preset", default="tiny")
    parser.add_argument("--batch", type=int, default=8)
    parser.add_argument("--seq", type=int, default=128)
    parser.add_argument("--steps", type=int, default=8)
    parser.add_argument("--one", help=argparse.SUPPRESS)  # a configuration name: measure it in this process
    args = parser.parse_args()
    if args.one is not None:
        print(json.dumps(measure_one(args.preset, CONFIGURATIONS[args.one], args.batch, args.seq, args.steps)))
        return
    env = {**os.environ, "OMP_NUM_THREADS": "1", "MKL_NUM_THREADS": "1"}
    results = {}
    for name, lora in CONFIGURATIONS.items():
        command = [sys.executable, __file__, "--one", name, "--preset", args.preset, "--batch", str(args.batch),
                   "--seq", str(args.seq), "--steps", str(args.steps)]
        out = subprocess.run(command, check=True, capture_output=True, text=True, env=env).stdout
        results[name] = {"lora": lora, **json.loads(out.strip().splitlines()[-1])}
    full = results["full"]
    for entry in results.values():
        entry["trainable_fraction"] = round(entry["trainable_params"] / full["trainable_params"], 5)
    print(json.dumps({
        "preset": args.preset, "batch": args.batch, "seq": args.seq, "steps": args.steps, "device": "cpu",
        "threads": 1, "torch": torch.__version__, "machine": platform.machine(), "results": results,
    }, indent=2))


if __name__ == "__main__":
    main()
