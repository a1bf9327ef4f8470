"""Training throughput next to `transformers`, for the two configurations issue 6 sets goals for.

    .venv/bin/python benchmarks/bench_train.py [--repeats 7]

Prints one JSON object per line: the modern `tiny` preset and the classic `13m` preset, batch 16,
fp32, 2 threads, each step interleaved with the `transformers` twin (LlamaForCausalLM / GPT-2).
Only ratios measured in the same run are meaningful on a shared machine.
"""

from __future__ import annotations

import argparse
import json

import torch

from tinylm.bench.suite import BenchOptions, run_bench

KEEP = ("train_tokens_per_s", "reference_train_tokens_per_s", "train_ratio_vs_transformers", "mfu",
        "reference_mfu", "mfu_with_attention", "peak_flops", "reference_model", "params")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeats", type=int, default=7)
    parser.add_argument("--threads", type=int, default=2)
    args = parser.parse_args()
    torch.set_num_threads(args.threads)
    for preset, arch in (("tiny", "modern"), ("13m", "classic")):
        options = BenchOptions(preset=preset, arch=arch, batch_size=16, repeats=args.repeats, warmup=2,
                               device="cpu", dtype="fp32", threads=args.threads, sections=("train",))
        result = run_bench(options)
        row = {"preset": preset, "arch": arch, **{k: result[k] for k in KEEP},
               "train_spread": [result["train"]["min"], result["train"]["max"]],
               "reference_train_spread": [result["reference_train"]["min"], result["reference_train"]["max"]]}
        print(json.dumps(row), flush=True)


if __name__ == "__main__":
    main()
