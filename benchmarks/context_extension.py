"""Issue 56's goal, measured: a `tiny` model trained at 256 tokens, extended to 1024 by each RoPE rule.

    python benchmarks/context_extension.py --out /tmp/ctx [--seeds 1 2 3] [--rules none linear dynamic yarn llama3]

For each seed: pretrain the `tiny` modern preset at 256 tokens (the demo's 600 steps) on the Python
standard library mixed with synthetic passkey documents (`--corpus pystdlib+passkey`, see
data/passkey_corpus.py: code alone teaches no retrieval to measure), score it at 256 and 1024 tokens,
then extend a copy to 1024 tokens with each rule for 60 steps (10% of pretraining) and score that.
Scores: passkey retrieval at 1024 tokens by depth (`tinylm eval --tasks passkey:1024`) and bits per
byte of dev positions below 256 and from 256 to 1024 (`bpb_positions:1024`). Every step is the
`tinylm` command a user would type. Prints one JSON object: every run's scores, and the mean and
range over seeds of each rule.
"""

from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import sys
from pathlib import Path

RULES = ("none", "linear", "dynamic", "yarn", "llama3")


def tinylm(*args: str) -> str:
    done = subprocess.run([sys.executable, "-m", "tinylm", *args], capture_output=True, text=True)
    if done.returncode:
        raise SystemExit(f"tinylm {' '.join(args)} failed:\n{done.stderr[-2000:]}")
    return done.stdout


def scores(run: Path, tasks: str, examples: int) -> dict[str, float]:
    out = tinylm("eval", "--checkpoint", str(run), "--tasks", tasks, "--examples", str(examples), "--json",
                 "--no-record", "--bpb-batches", "8")
    flat: dict[str, float] = {}
    for task, values in json.loads(out.strip().splitlines()[-1])["tasks"].items():
        flat.update({f"{task} {name}": value for name, value in values.items()})
    return flat


def summary(flat: dict[str, float], original: int, length: int) -> dict[str, float]:
    """Passkey at `length` by depth, and bits per byte below the trained context and past it."""
    out = {key.split(" ", 1)[1]: value for key, value in flat.items() if key.startswith(f"passkey:{length} ")}
    out["bpb below"] = flat[f"bpb_positions:{length} bpb@0-{original}"]
    out["bpb past"] = flat[f"bpb_positions:{length} bpb@{original}-{length}"]
    out["bpb past / below"] = out["bpb past"] / out["bpb below"]
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--out", type=Path, required=True)
    parser.add_argument("--seeds", type=int, nargs="+", default=[1, 2, 3])
    parser.add_argument("--rules", nargs="+", default=list(RULES), choices=RULES)
    parser.add_argument("--base-steps", type=int, default=600)
    parser.add_argument("--extend-steps", type=int, default=60)
    parser.add_argument("--extend-batch", type=int, default=8)
    parser.add_argument("--examples", type=int, default=200, help="passkey prompts per length (five depths)")
    args = parser.parse_args()
    data = args.out / "data"
    tinylm("prepare", "--corpus", "pystdlib+passkey", "--out", str(data), "--no-progress")
    runs: dict[str, dict[str, dict[str, float]]] = {}
    for seed in args.seeds:
        base = args.out / f"base-s{seed}"
        if not (base / "checkpoints").is_dir():
            tinylm("train", "--data", str(data), "--out", str(base), "--seed", str(seed), "--max-steps",
                   str(args.base_steps), "--no-progress")
        flat = scores(base, "passkey:256,passkey:1024,bpb_positions:1024", args.examples)
        runs.setdefault("unextended", {})[str(seed)] = {
            "passkey at 256": flat["passkey:256 passkey"], **summary(flat, 256, 1024)}
        for rule in args.rules:
            run = args.out / f"{rule}-s{seed}"
            if not (run / "checkpoints").is_dir():
                tinylm("train", "--extend", str(base), "--data", str(data), "--out", str(run), "--seed", str(seed),
                       "--set", "context_length=1024", "--set", f"rope_scaling={rule}", "--max-steps",
                       str(args.extend_steps), "--batch-size", str(args.extend_batch), "--no-progress")
            runs.setdefault(rule, {})[str(seed)] = summary(scores(run, "passkey:1024,bpb_positions:1024",
                                                                  args.examples), 256, 1024)
            print(json.dumps({"rule": rule, "seed": seed, **runs[rule][str(seed)]}), file=sys.stderr, flush=True)
    table = {rule: {name: {"mean": statistics.mean(by_seed[s][name] for s in by_seed),
                           "min": min(by_seed[s][name] for s in by_seed), "max": max(by_seed[s][name] for s in by_seed)}
                    for name in next(iter(by_seed.values()))} for rule, by_seed in runs.items()}
    print(json.dumps({"base_steps": args.base_steps, "extend_steps": args.extend_steps,
                      "extend_batch": args.extend_batch, "seeds": args.seeds, "runs": runs, "table": table}, indent=1))


if __name__ == "__main__":
    main()
