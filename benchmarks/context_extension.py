"""Issue 56's goal, measured: a `tiny` model trained at 256 tokens, extended to 1024 by each RoPE rule.

    python benchmarks/context_extension.py --out /tmp/ctx [--seeds 1 2 3] [--rules none linear dynamic yarn llama3]

For each seed: pretrain the `tiny` modern preset at 256 tokens for 1,500 steps on the Python standard
library mixed with 12,000 synthetic passkey documents (`--corpus pystdlib+passkey:12000`, see
data/passkey_corpus.py: code alone teaches no retrieval to measure, and a `tiny` model first finds
keys after some 750 steps), score it at 256 and 1024 tokens, then extend a copy to 1024 tokens with
each rule for 150 steps (10% of pretraining) and score that. The extension reads the same corpus plus
3,000 passkey documents of 1,024 tokens (`passkey:3000:1024`, the base's tokenizer), each row a long
document's end (`--long-documents --document-ends`), at a fifth of pretraining's learning rates
(`--extend-passkey 0 --extend-lr 0 --extend-muon-lr 0`: the pretraining data, rows anywhere, its rates).
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
    for task, values in json.loads(out.strip().splitlines()[-1])["scores"].items():
        flat.update({f"{task} {name}": value for name, value in values.items()})
    return flat


def rates(lr: float, muon_lr: float) -> list[str]:
    """`tinylm train`'s rate flags for the rates given; 0 leaves a rate at the run's own default."""
    return [*(["--lr", str(lr)] if lr else []), *(["--muon-lr", str(muon_lr)] if muon_lr else [])]


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
    parser.add_argument("--passkey-documents", type=int, default=12_000)
    parser.add_argument("--base-steps", type=int, default=1500)
    parser.add_argument("--base-batch", type=int, default=16, help="rows of 256 tokens a pretraining step")
    parser.add_argument("--base-lr", type=float, default=0, help="pretraining's AdamW lr (0: the record's)")
    parser.add_argument("--base-muon-lr", type=float, default=0, help="pretraining's Muon lr (0: the record's)")
    parser.add_argument("--extend-steps", type=int, default=150)
    parser.add_argument("--extend-batch", type=int, default=4, help="rows of 1024 tokens")
    parser.add_argument("--long-documents", action="store_true", help="extend on rows inside one document")
    parser.add_argument("--extend-passkey", type=int, default=3000, metavar="N",
                        help="extend on data with N more passkey documents of 1,024 tokens (passkey:N:1024, the "
                             "base's tokenizer), each row a long document's end (--long-documents --document-ends); "
                             "0: on the pretraining data")
    parser.add_argument("--far", action="store_true",
                        help="the extension's passkey documents weighted toward far keys (passkey:N:1024:far)")
    parser.add_argument("--extend-lr", type=float, default=0.012, help="the extension's AdamW lr (0: pretraining's)")
    parser.add_argument("--extend-muon-lr", type=float, default=0.004,
                        help="the extension's Muon lr (0: pretraining's)")
    parser.add_argument("--rope-theta", type=float, default=None,
                        help="the extension also raises RoPE's base to this (Code Llama's adjusted base frequency)")
    parser.add_argument("--tag", default="", help="appended to the extended runs' folder names")
    parser.add_argument("--examples", type=int, default=100, help="passkey prompts per length (five depths)")
    args = parser.parse_args()
    data = args.out / "data"
    corpus = f"pystdlib+passkey:{args.passkey_documents}"
    tinylm("prepare", "--corpus", corpus, "--out", str(data), "--no-progress")
    extend_data, extend_rows = data, ["--long-documents"] if args.long_documents else []
    if args.extend_passkey:
        extend_data = args.out / f"data-extend-{args.extend_passkey}{'-far' if args.far else ''}"
        extend_rows = ["--long-documents", "--document-ends"]
        tinylm("prepare", "--corpus", f"{corpus}+passkey:{args.extend_passkey}:1024{':far' if args.far else ''}",
               "--tokenizer", str(data / "tokenizer.json"), "--out", str(extend_data), "--no-progress")
    extend_rows += [*(["--set", f"rope_theta={args.rope_theta:g}"] if args.rope_theta else []),
                    *rates(args.extend_lr, args.extend_muon_lr)]
    results = args.out / "results.jsonl"  # one line per scored run: several instances may share a folder
    for seed in args.seeds:
        base = args.out / f"base-s{seed}"
        if not (base / "checkpoints").is_dir():
            tinylm("train", "--data", str(data), "--out", str(base), "--seed", str(seed), "--max-steps",
                   str(args.base_steps), "--batch-size", str(args.base_batch), "--no-progress",
                   *rates(args.base_lr, args.base_muon_lr))
        if not scored(results, "unextended", seed):
            flat = scores(base, "passkey:256,passkey:1024,bpb_positions:1024", args.examples)
            record(results, "unextended", seed, {"passkey at 256": flat["passkey:256 passkey"],
                                                 **summary(flat, 256, 1024)})
        for rule in args.rules:
            run = args.out / f"{rule}{args.tag}-s{seed}"
            if not (run / "checkpoints").is_dir():
                tinylm("train", "--extend", str(base), "--data", str(extend_data), "--out", str(run), "--seed",
                       str(seed), "--set", "context_length=1024", "--set", f"rope_scaling={rule}", "--max-steps",
                       str(args.extend_steps), "--batch-size", str(args.extend_batch), "--no-progress", *extend_rows)
            flat = scores(run, "passkey:1024,bpb_positions:1024", args.examples)
            record(results, rule + args.tag, seed, summary(flat, 256, 1024))
    runs: dict[str, dict[int, dict[str, float]]] = {}
    for line in results.read_text().splitlines():
        row = json.loads(line)
        runs.setdefault(row.pop("rule"), {})[row.pop("seed")] = row
    table = {rule: {name: {"mean": statistics.mean(by_seed[s][name] for s in by_seed),
                           "min": min(by_seed[s][name] for s in by_seed), "max": max(by_seed[s][name] for s in by_seed)}
                    for name in next(iter(by_seed.values()))} for rule, by_seed in runs.items()}
    print(json.dumps({"base_steps": args.base_steps, "base_batch": args.base_batch, "base_lr": args.base_lr,
                      "base_muon_lr": args.base_muon_lr, "extend_steps": args.extend_steps,
                      "extend_batch": args.extend_batch, "long_documents": args.long_documents,
                      "extend_passkey": args.extend_passkey, "far": args.far,
                      "rope_theta": args.rope_theta, "extend_lr": args.extend_lr, "extend_muon_lr": args.extend_muon_lr,
                      "seeds": sorted({s for by_seed in runs.values() for s in by_seed}), "runs": runs,
                      "table": table}, indent=1))


def scored(results: Path, rule: str, seed: int) -> bool:
    """Whether an earlier instance sharing this folder has scored this run already."""
    return results.is_file() and any((row["rule"], row["seed"]) == (rule, seed)
                                     for row in map(json.loads, results.read_text().splitlines()))


def record(results: Path, rule: str, seed: int, scores: dict[str, float]) -> None:
    with results.open("a") as out:
        out.write(json.dumps({"rule": rule, "seed": seed, **scores}) + "\n")
    print(json.dumps({"rule": rule, "seed": seed, **scores}), file=sys.stderr, flush=True)

if __name__ == "__main__":
    main()
