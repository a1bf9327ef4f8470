"""Speculative decoding with a draft before and after distillation: acceptance and `tinylm generate --draft` speed.

    python benchmarks/draft_speed.py --target runs/small --draft plain=runs/draft --draft distilled=runs/draft-kd

Decodes greedily at batch 1 the way `tinylm generate` does (the same loading, precision policy and engine:
`Engine.stream` alone, a `SpeculativeDecoder` built once per draft) from prompts cut from the target's dev shard, and
prints one JSON object: per draft, its acceptance rate, tokens per target forward, tokens/s, the speed-up over
the target alone (measured in the same run, the runs alternating, best of --repeats) and whether every
greedy continuation is token-identical to the target's own.
"""

from __future__ import annotations

import argparse
import json
import platform
import time
from pathlib import Path

import numpy as np
import torch

from tinylm.checkpoint import read_checkpoint_config, resolve_checkpoint
from tinylm.data.loader import load_tokens
from tinylm.inference.engine import Engine
from tinylm.inference.loading import load_for_generation
from tinylm.inference.sampling import GREEDY
from tinylm.inference.speculative import SpeculativeDecoder, SpeculativeStats


def dev_prompts(target: str, count: int, length: int) -> list[list[int]]:
    """`count` prompts of `length` tokens, evenly spaced through the dev shard of the target's pretraining data."""
    info = read_checkpoint_config(resolve_checkpoint(target))
    links = info.get("lineage") or [{"data": info.get("data")}]
    tokens, _ = load_tokens(Path(links[0]["data"]) / "dev.bin", "dev")
    starts = np.linspace(0, len(tokens) - length - 1, count).astype(np.int64)
    return [tokens[s:s + length].astype(np.int64).tolist() for s in starts]


def decode(engine: Engine, speculator: SpeculativeDecoder | None, prompt: list[int], new_tokens: int,
           stats: SpeculativeStats | None = None) -> tuple[list[int], float]:
    start = time.perf_counter()
    if speculator is None:
        out = list(engine.stream(prompt, new_tokens, GREEDY))
    else:
        out = list(speculator.stream(prompt, new_tokens, sampling=GREEDY, stats=stats))
    return out, time.perf_counter() - start


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--target", required=True, help="the model drafted for (run or checkpoint folder)")
    parser.add_argument("--draft", action="append", required=True, metavar="NAME=RUN", help="a draft (repeatable)")
    parser.add_argument("--prompts", type=int, default=8)
    parser.add_argument("--prompt-tokens", type=int, default=32)
    parser.add_argument("--new-tokens", type=int, default=128)
    parser.add_argument("--k", type=int, default=4, help="draft tokens per round")
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--threads", type=int, default=1)
    parser.add_argument("--unpacked-verifier", action="store_true",
                        help="also decode each draft with the target's weights as for one row a call (the verifier "
                             "before packed_float.py), in the same run")
    args = parser.parse_args()
    torch.set_num_threads(args.threads)
    target, _, meta = load_for_generation(args.target)
    drafts = {}
    for item in args.draft:
        name, _, path = item.partition("=")
        model = load_for_generation(path)[0]
        drafts[name] = SpeculativeDecoder(target, model, args.k)  # built once, as generate does
        if args.unpacked_verifier:
            drafts[f"{name}, unpacked verifier"] = SpeculativeDecoder(target, model, args.k, packed_verifier=False)
    engine = Engine(target)
    prompts = dev_prompts(args.target, args.prompts, args.prompt_tokens)
    reference = [decode(engine, None, p, args.new_tokens)[0] for p in prompts]  # also the warm-up
    best = {name: float("inf") for name in ["target", *drafts]}
    stats = {name: SpeculativeStats() for name in drafts}
    identical = dict.fromkeys(drafts, True)
    for repeat in range(args.repeats):
        for name in (["target", *drafts] if repeat % 2 == 0 else [*drafts, "target"]):
            total = 0.0
            for prompt, expected in zip(prompts, reference):
                speculator = drafts.get(name)
                out, seconds = decode(engine, speculator, prompt, args.new_tokens,
                                      stats[name] if speculator is not None and repeat == 0 else None)
                total += seconds
                if speculator is not None:
                    identical[name] &= out == expected
            best[name] = min(best[name], total)
    generated = sum(len(r) for r in reference)
    alone = generated / best["target"]
    report = {"machine": {"cpu": platform.processor() or platform.machine(), "torch": torch.__version__,
                          "threads": args.threads},
              "target": meta["path"], "decode_precision": meta.get("decode_precision"), "k": args.k,
              "prompts": args.prompts, "new_tokens": args.new_tokens, "target_tokens_per_s": round(alone, 1),
              "drafts": {name: {"acceptance_rate": round(stats[name].acceptance_rate, 4),
                                "tokens_per_target_pass": round(stats[name].tokens_per_target_pass, 3),
                                "tokens_per_s": round(generated / best[name], 1),
                                "speedup": round(best["target"] / best[name], 3),
                                "identical_greedy_output": identical[name]} for name in drafts}}
    print(json.dumps(report, indent=2))


if __name__ == "__main__":
    main()
