"""Step time and peak memory of DPO's three ways to compute the reference model (stages/preference/reference.py).

    copy      a frozen second model, run forward every step          (full fine-tuning)
    cached    reference log-probs computed once before training      (full fine-tuning)
    adapters  the LoRA base with adapters off, run forward every step (LoRA)

Each mode runs in its own process (so peak memory is that mode's alone): the stage is set up on a base
checkpoint exactly as `tinylm dpo` sets it up, then `--steps` optimizer steps are timed (median after
one warm-up step). Peak memory is the process's peak resident set (CPU) or `max_memory_allocated` (CUDA).
Prints one JSON object.

    python benchmarks/bench_dpo_reference.py --base runs/tiny-modern-sft [--steps 10] [--batch-size 8]
"""

from __future__ import annotations

import argparse
import json
import platform
import resource
import statistics
import subprocess
import sys
import time
from pathlib import Path
from tempfile import TemporaryDirectory

MODES = {"copy": {"reference": "copy"}, "cached": {"reference": "cached"},
         "adapters": {"reference": "adapters", "lora_rank": 8}}


def measure(mode: str, base: str, steps: int, batch_size: int, seq_len: int, device: str) -> dict:
    import torch

    from tinylm.runtime.distributed import DistEnv
    from tinylm.stages.preference.config import DPOConfig
    from tinylm.stages.preference.dpo import DPOStage
    from tinylm.train.stage import StageContext
    from tinylm.train.step import accumulate_gradients

    dev = torch.device(device)
    with TemporaryDirectory() as out:
        cfg = DPOConfig(base=base, data="builtin:arith", out=out, batch_size=batch_size, seq_len=seq_len,
                        train_examples=max(64, batch_size * (steps + 1)), eval_examples=8, progress=False,
                        **MODES[mode])
        stage = DPOStage()
        stage.setup(StageContext(cfg=cfg, env=DistEnv(), device=dev, dtype=torch.float32, run_dir=Path(out),
                                 resume=None, start_from=None, say=lambda line: None))
        t0 = time.perf_counter()
        model = stage.build_model().to(dev)
        setup_s = time.perf_counter() - t0
        optimizer = torch.optim.AdamW([p for p in model.parameters() if p.requires_grad], lr=1e-4)
        times = []
        for _ in range(steps + 1):
            start = time.perf_counter()
            batch = stage.next_batch()
            accumulate_gradients(model, [batch], stage.loss, batch_size, 1, dev, torch.float32)
            optimizer.step()
            optimizer.zero_grad(set_to_none=True)
            if dev.type == "cuda":
                torch.cuda.synchronize()
            times.append(time.perf_counter() - start)
    peak = (torch.cuda.max_memory_allocated() if dev.type == "cuda"
            else resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024)
    return {"step_ms": 1000 * statistics.median(times[1:]), "setup_s": setup_s, "peak_mb": peak / 2**20,
            "trainable_params": sum(p.numel() for p in model.parameters() if p.requires_grad)}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--base", required=True, help="a checkpoint or run folder (e.g. an SFT run)")
    parser.add_argument("--steps", type=int, default=10)
    parser.add_argument("--batch-size", type=int, default=8)
    parser.add_argument("--seq-len", type=int, default=64)
    parser.add_argument("--device", default="cpu")
    parser.add_argument("--mode", choices=MODES, help=argparse.SUPPRESS)  # one mode, in a child process
    args = parser.parse_args()
    if args.mode:
        print(json.dumps(measure(args.mode, args.base, args.steps, args.batch_size, args.seq_len, args.device)))
        return
    results = {}
    for mode in MODES:
        child = subprocess.run([sys.executable, __file__, "--mode", mode, "--base", args.base, "--steps",
                                str(args.steps), "--batch-size", str(args.batch_size), "--seq-len", str(args.seq_len),
                                "--device", args.device], capture_output=True, text=True, check=True)
        results[mode] = json.loads(child.stdout.strip().splitlines()[-1])
    print(json.dumps({"base": args.base, "batch_size": args.batch_size, "seq_len": args.seq_len,
                      "device": args.device, "machine": platform.machine(), "modes": results}, indent=2))


if __name__ == "__main__":
    main()
