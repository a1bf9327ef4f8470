"""Pretraining with a teacher against pretraining without, in the same wall time: dev bits per byte per seed.

    python benchmarks/distill_pretrain.py --teacher runs/small-modern --budget 240 --seeds 1,2,3 --out runs/kd-race

For each seed it trains the student twice on the teacher's pretraining data, `tinylm train` (the student's
preset at the teacher's vocabulary) and `tinylm distill --teacher`, each for --budget seconds of training
(the teacher's forward is inside the distilled run's steps, so it is paid for), the two in alternating
order from seed to seed. Both are scored on the same dev rows (the first --eval-batches x 16 windows of
dev.bin). Prints one JSON object: each run's final dev bits per byte, tokens and steps, the per-seed
difference and the means with the seeds' spread. Options after `--` go to both runs (--threads 1, --dtype
fp32); --distill-args "..." to the distilled run alone (--ce-weight 0.2 --divergence reverse_kl).
"""

from __future__ import annotations

import argparse
import json
import shlex
import statistics
import subprocess
import sys
from pathlib import Path
from typing import Any

from tinylm.checkpoint import checkpoint_model_config, read_checkpoint_config, resolve_checkpoint


def last_eval(run: Path) -> dict[str, Any]:
    rows = [json.loads(line) for line in (run / "metrics.jsonl").read_text().splitlines() if line.strip()]
    evaluation = [r for r in rows if "dev_bpb" in r][-1]
    steps = [r for r in rows if "loss" in r]
    return {"dev_bpb": evaluation["dev_bpb"], "step": evaluation["step"], "tokens": steps[-1]["tokens"],
            "train_s": steps[-1]["train_s"]}


def run(command: list[str]) -> None:
    print("$ tinylm " + " ".join(command), file=sys.stderr, flush=True)
    subprocess.run([sys.executable, "-m", "tinylm", *command], check=True, stdout=subprocess.DEVNULL)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--teacher", required=True)
    parser.add_argument("--preset", default="tiny", help="the student's preset")
    parser.add_argument("--budget", type=float, default=240.0, help="seconds of training per run")
    parser.add_argument("--seeds", default="1,2,3")
    parser.add_argument("--eval-batches", type=int, default=20)
    parser.add_argument("--set", action="append", default=[], metavar="FIELD=VALUE",
                        help="a model field of the student, both runs (repeatable)")
    parser.add_argument("--out", default="runs/kd-race")
    parser.add_argument("--distill-args", default="", help="more tinylm distill options, quoted")
    parser.add_argument("both", nargs="*", help="after --: options for both runs")
    args = parser.parse_args()
    teacher = resolve_checkpoint(args.teacher)
    info = read_checkpoint_config(teacher)
    data = (info.get("lineage") or [{"data": info.get("data")}])[0]["data"]
    vocab = checkpoint_model_config(teacher).vocab_size
    shape = [a for item in args.set for a in ("--set", item)]
    common = ["--preset", args.preset, *shape, "--time-budget", str(args.budget), "--max-steps", "100000",
              "--eval-every", "50", "--eval-batches", str(args.eval_batches), "--no-progress", *args.both]
    distill_only = shlex.split(args.distill_args)
    out = Path(args.out)
    results: dict[str, dict[int, dict[str, Any]]] = {"plain": {}, "distilled": {}}
    for index, seed in enumerate(int(s) for s in args.seeds.split(",")):
        commands = {
            "plain": ["train", "--data", data, "--set", f"vocab_size={vocab}", "--sample-tokens", "0", *common,
                      "--seed", str(seed), "--out", str(out / f"plain-{seed}")],
            "distilled": ["distill", "--teacher", str(teacher), *common, "--seed", str(seed),
                          "--out", str(out / f"distilled-{seed}"), *distill_only],
        }
        for name in (("plain", "distilled") if index % 2 == 0 else ("distilled", "plain")):
            run(commands[name])
            results[name][seed] = last_eval(out / f"{name}-{seed}")
    differences = [results["distilled"][s]["dev_bpb"] - results["plain"][s]["dev_bpb"] for s in results["plain"]]
    summary = {name: {"mean_dev_bpb": statistics.fmean(r["dev_bpb"] for r in runs.values()),
                      "spread": max(r["dev_bpb"] for r in runs.values()) - min(r["dev_bpb"] for r in runs.values()),
                      "mean_tokens": statistics.fmean(r["tokens"] for r in runs.values())}
               for name, runs in results.items()}
    print(json.dumps({"teacher": str(teacher), "student": args.preset, "budget_s": args.budget,
                      "options": args.both, "distill_options": distill_only, "runs": results, "summary": summary,
                      "distilled_minus_plain": differences,
                      "distilled_better_every_seed": all(d < 0 for d in differences)}, indent=2))


if __name__ == "__main__":
    main()
