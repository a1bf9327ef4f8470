"""Rollout throughput: `sample_rollouts` (log-probs recorded, per-row seeds) next to plain `Engine` decoding.

RL spends most of its wall time sampling. This prints one JSON object with response tokens per second
for the same batch (P prompts x G samples, temperature 1, a fixed number of new tokens with no stop
token, so every method produces exactly the same amount of text) through:

- `rollout`: stages/rl/rollout.py, the model's own KV-cache path, what `tinylm rl` uses;
- `engine_generic`: `Engine(fast=False)`, the same cached forward without log-probs;
- `engine_fast`: `Engine` with the fused fast decoder (the fastest plain sampling tinylm has).

Weights are random: speed does not depend on them.

    python benchmarks/bench_rollout.py [--preset tiny] [--prompts 8] [--group 8] [--new-tokens 16] [--threads 2]
"""

from __future__ import annotations

import argparse
import json
import platform
import time

import torch

from tinylm.inference.engine import Engine
from tinylm.inference.sampling import SamplingParams
from tinylm.models.factory import build_model
from tinylm.presets import preset_config
from tinylm.stages.rl.rollout import sample_rollouts


def _best_of(repeats: int, run: object) -> float:
    best = float("inf")
    for _ in range(repeats):
        t0 = time.perf_counter()
        run()  # type: ignore[operator]
        best = min(best, time.perf_counter() - t0)
    return best


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--preset", default="tiny")
    parser.add_argument("--prompts", type=int, default=8)
    parser.add_argument("--group", type=int, default=8)
    parser.add_argument("--new-tokens", type=int, default=16)
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--threads", type=int, default=None)
    args = parser.parse_args()
    if args.threads:
        torch.set_num_threads(args.threads)
    torch.manual_seed(0)
    model = build_model(preset_config(args.preset)).eval()
    vocab = model.config.vocab_size
    g = torch.Generator().manual_seed(0)
    prompts = [torch.randint(1, vocab, (int(n),), generator=g).tolist()
               for n in torch.randint(8, 16, (args.prompts,), generator=g)]
    sampling = SamplingParams(temperature=1.0)
    rows = [p for p in prompts for _ in range(args.group)]
    tokens = len(rows) * args.new_tokens

    def rollout() -> None:
        sample_rollouts(model, prompts, args.group, args.new_tokens, sampling, seeds=list(range(len(prompts))),
                        stop_ids=[], pad_id=0)

    generic, fast = Engine(model, fast=False), Engine(model)
    results = {
        "rollout": tokens / _best_of(args.repeats, rollout),
        "engine_generic": tokens / _best_of(args.repeats, lambda: generic.generate(rows, args.new_tokens, sampling)),
        "engine_fast": tokens / _best_of(args.repeats, lambda: fast.generate(rows, args.new_tokens, sampling)),
    }
    print(json.dumps({
        "benchmark": "rollout", "preset": args.preset, "prompts": args.prompts, "group": args.group,
        "new_tokens": args.new_tokens, "threads": torch.get_num_threads(), "machine": platform.processor(),
        "tokens_per_s": {k: round(v, 1) for k, v in results.items()},
        "rollout_vs_engine_generic": round(results["rollout"] / results["engine_generic"], 3),
        "rollout_vs_engine_fast": round(results["rollout"] / results["engine_fast"], 3),
    }, indent=2))


if __name__ == "__main__":
    main()
