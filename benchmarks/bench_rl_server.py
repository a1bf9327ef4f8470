"""RL steps per second with in-process rollouts against rollouts from a `tinylm serve` on the other core.

Generation dominates RL, which is why large setups sample on an inference server. This runs the same
`tinylm rl` (GRPO, a random-weight model of --preset, the built-in arithmetic task) three ways and
prints one JSON object:

- `in_process_1core`: trainer and sampler share core 0 (1 thread);
- `in_process_2cores`: the same with 2 threads on both cores (what one would otherwise do);
- `server`: the trainer on core 0 (1 thread) and `tinylm serve --dtype fp32` on core 1 (1 thread,
  --max-slots P x G, so a round's rows decode as one batch, as in-process); every round the trainer
  publishes its weights and the server reloads them (`sync_s`).

The rollouts are the same tokens all three ways (the server draws a seeded request as the trainer
does), so each does the same work. Per step: rollout_s (sync included), update_s, from metrics.jsonl,
the first step left out (warm-up). `to_win` says what the server variant lacks: sampling and the update
take turns, so the second core idles half the step; `overlapped_steps_per_s` is the bound if round
k+1 were sampled while round k trains (one step off-policy, which the TIS weight corrects).

    python benchmarks/bench_rl_server.py [--preset tiny] [--steps 6] [--prompts 8] [--group 8] [--new-tokens 16]
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import httpx
import torch

from tinylm.checkpoint import save_checkpoint
from tinylm.models.factory import build_model
from tinylm.presets import preset_config
from tinylm.tasks.registry import get_task
from tinylm.tokenizer import train_bpe

TASK = "builtin:arith?digits=2&ops=+"


def make_base(root: Path, preset: str) -> Path:
    """A random-weight model of `preset` with a BPE trained on the task's prompts (speed does not need skill)."""
    texts = [f"{e.prompt} {e.answer}" for e in get_task(TASK).examples("train", 2000, 0)]
    tokenizer_file = train_bpe(texts * 5, vocab_size=1024).save(root / "tokenizer.json")
    config = preset_config(preset)
    torch.manual_seed(0)
    save_checkpoint(root / "base", 1, build_model(config), config, tokenizer_file=tokenizer_file)
    return root / "base"


def pinned(cores: set[int]):
    def pin() -> None:
        if hasattr(os, "sched_setaffinity"):
            os.sched_setaffinity(0, cores)
    return pin


def rl(base: Path, out: Path, args: argparse.Namespace, threads: int, cores: set[int], *extra: str) -> dict:
    command = [sys.executable, "-m", "tinylm", "rl", "--base", str(base), "--task", TASK, "--out", str(out),
               "--max-steps", str(args.steps), "--batch-size", str(args.prompts), "--group-size", str(args.group),
               "--max-new-tokens", str(args.new_tokens), "--eval-every", "0", "--eval-examples", "1",
               "--no-progress", "--threads", str(threads), "--seed", "0", *extra]
    t0 = time.perf_counter()
    subprocess.run(command, check=True, preexec_fn=pinned(cores), stdout=subprocess.DEVNULL)
    wall = time.perf_counter() - t0
    steps = [json.loads(line) for line in (out / "metrics.jsonl").read_text().splitlines()]
    steps = [r for r in steps if "loss" in r][1:]  # the first step warms up
    rollout = statistics.median(r["rollout_s"] for r in steps)
    update = statistics.median(r["update_s"] for r in steps)
    result = {"rollout_s": round(rollout, 4), "update_s": round(update, 4),
              "steps_per_s": round(1 / (rollout + update), 3), "command_s": round(wall, 1),
              "reward": [r["reward"] for r in steps]}
    if "sync_s" in steps[0]:
        result["sync_s"] = round(statistics.median(r["sync_s"] for r in steps), 4)
        result["sampler_gap_max"] = max(r["sampler_gap_max"] for r in steps)
    return result


def serve(base: Path, port: int, slots: int) -> subprocess.Popen:
    process = subprocess.Popen([sys.executable, "-m", "tinylm", "serve", "--checkpoint", str(base), "--port",
                                str(port), "--dtype", "fp32", "--threads", "1", "--max-slots", str(slots)],
                               preexec_fn=pinned({1}), stderr=subprocess.DEVNULL)
    for _ in range(600):
        try:
            httpx.get(f"http://127.0.0.1:{port}/health", timeout=1)
            return process
        except httpx.HTTPError:
            time.sleep(0.1)
    process.kill()
    raise RuntimeError("tinylm serve did not start")


def to_win(alone: dict, both: dict, served: dict) -> str:
    """What the numbers say the server variant lacks, in one sentence."""
    bound = max(served["rollout_s"], served["update_s"])
    budget = 1 / both["steps_per_s"]
    return (f"sampling through the server takes {served['rollout_s']:.3f} s a step ({served['sync_s']:.3f} s of it "
            f"the weight sync) against {alone['rollout_s']:.3f} s in-process on one core, and sampling and update "
            f"take turns, so each core idles part of the step; sampling round k+1 during round k's update (one step "
            f"off-policy, which TIS corrects) would bound the step at {bound:.3f} s ({1 / bound:.2f} steps/s); beating "
            f"both cores in-process ({both['steps_per_s']:.2f} steps/s) needs the server's rollouts and the one-core "
            f"update each under {budget:.3f} s")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--preset", default="tiny")
    parser.add_argument("--steps", type=int, default=6)
    parser.add_argument("--prompts", type=int, default=8)
    parser.add_argument("--group", type=int, default=8)
    parser.add_argument("--new-tokens", type=int, default=16)
    parser.add_argument("--port", type=int, default=8931)
    args = parser.parse_args()
    if len(os.sched_getaffinity(0)) < 2:
        raise SystemExit("this benchmark needs 2 cores: the trainer on one, the server on the other")
    with tempfile.TemporaryDirectory(prefix="tinylm-bench-rl-") as tmp:
        root = Path(tmp)
        base = make_base(root, args.preset)
        results = {"in_process_1core": rl(base, root / "one", args, 1, {0}),
                   "in_process_2cores": rl(base, root / "two", args, 2, {0, 1})}
        server = serve(base, args.port, args.prompts * args.group)  # every row of a round in one batch
        try:
            results["server"] = rl(base, root / "served", args, 1, {0}, "--rollout-url",
                                   f"http://127.0.0.1:{args.port}")
        finally:
            server.terminate()
            server.wait(30)
    alone, both, served = results["in_process_1core"], results["in_process_2cores"], results["server"]
    overlapped = 1 / max(served["rollout_s"], served["update_s"])
    print(json.dumps({
        "benchmark": "rl_server", "preset": args.preset, "prompts": args.prompts, "group": args.group,
        "new_tokens": args.new_tokens, "machine": platform.processor() or platform.machine(),
        "same_rollouts": alone["reward"] == served["reward"] == both["reward"],
        **results,
        "server_vs_in_process_1core": round(served["steps_per_s"] / alone["steps_per_s"], 3),
        "server_vs_in_process_2cores": round(served["steps_per_s"] / both["steps_per_s"], 3),
        "overlapped_steps_per_s": round(overlapped, 3),
        "to_win": to_win(alone, both, served),
    }, indent=2))


if __name__ == "__main__":
    main()
