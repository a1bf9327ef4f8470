"""Did a change cost training or decode speed? Two commits' benchmarks, alternating, in one run.

    python benchmarks/ab_commits.py BEFORE AFTER [--rounds 4] [--benches train,decode] [--quick]

Each commit is checked out into a temporary worktree. Every round runs `bench_train.py` and
`bench_decode.py` (this checkout's copies: one harness, so only the library differs) once per commit,
the order swapped every round so a machine that slows down over the run does not favour one side.
Each process starts as the `tinylm` command of that commit starts: where the commit has
`tinylm.runtime.start_env` (the numerics it sets, `MKL_CBWR`), it is imported before torch loads.

The headline is the ratio against `transformers` measured inside each bench process (a shared machine
slows both sides of it alike); absolute tokens/s are listed too, with every round's value. Prints one
JSON object: for each metric, each commit's median and values, and AFTER's median over BEFORE's.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

BENCHMARKS = Path(__file__).resolve().parent
REPO = BENCHMARKS.parent

# what each benchmark reports that a change could cost: (name in the summary, how to read it from the output)
_KEYS = {"train": (("tokens/s", "train_tokens_per_s"), ("vs transformers", "train_ratio_vs_transformers")),
         "decode": (("tokens/s", "cached_tokens_per_s"), ("vs transformers", "ratio_vs_transformers"))}
METRICS = {bench: [(f"{bench} {preset} {name}", preset, key) for preset in ("tiny", "13m") for name, key in keys]
           for bench, keys in _KEYS.items()}

LAUNCHER = """
import importlib.util, runpy, sys
try:
    found = importlib.util.find_spec("tinylm.runtime.start_env") is not None
except ModuleNotFoundError:  # (no tinylm.runtime at all)
    found = False
if found:
    import tinylm.runtime.start_env  # the numerics this commit's tinylm command sets, before torch loads
sys.argv = sys.argv[1:]
runpy.run_path(sys.argv[0], run_name="__main__")
"""


def bench_arguments(bench: str, quick: bool) -> list[str]:
    if bench == "train":
        return ["--repeats", "3" if quick else "5"]
    return ["--quick"] if quick else []


def read_metrics(bench: str, output: str) -> dict[str, float]:
    """The metrics of one benchmark run from what it printed (train: a JSON line per preset; decode: one object)."""
    if bench == "train":
        by_preset = {row["preset"]: row for row in map(json.loads, output.splitlines()) if row}
    else:
        by_preset = json.loads(output)
    return {name: float(by_preset[preset][key]) for name, preset, key in METRICS[bench]}


def run_bench(tree: Path, bench: str, quick: bool) -> dict[str, float]:
    script = BENCHMARKS / f"bench_{bench}.py"
    command = [sys.executable, "-c", LAUNCHER, str(script), *bench_arguments(bench, quick)]
    done = subprocess.run(command, cwd=tree, env=_env_with_source(tree), capture_output=True, text=True)
    if done.returncode != 0:
        last = (done.stderr.strip().splitlines() or ["(no output)"])[-1]
        raise SystemExit(f"bench_{bench}.py failed on {tree.name}: {last}")
    return read_metrics(bench, done.stdout)


def _env_with_source(tree: Path) -> dict[str, str]:
    return {**os.environ, "PYTHONPATH": str(tree / "src")}


def summarize(values: dict[str, dict[str, list[float]]], before: str, after: str) -> dict[str, dict]:
    """Per metric: each side's median and values, and after's median over before's."""
    summary = {}
    for metric in values[before]:
        first, second = values[before][metric], values[after][metric]
        median_first, median_second = statistics.median(first), statistics.median(second)
        summary[metric] = {before: {"median": round(median_first, 3), "values": first},
                           after: {"median": round(median_second, 3), "values": second},
                           "after_over_before": round(median_second / median_first, 3)}
    return summary


def worktree(ref: str, folder: Path) -> Path:
    subprocess.run(["git", "-C", str(REPO), "worktree", "add", "--detach", "-q", str(folder), ref], check=True)
    return folder


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("before")
    parser.add_argument("after")
    parser.add_argument("--rounds", type=int, default=4)
    parser.add_argument("--benches", default="train,decode", help="comma-separated: train, decode")
    parser.add_argument("--quick", action="store_true", help="fewer repeats per bench (a smoke run)")
    args = parser.parse_args()
    benches = [b for b in args.benches.split(",") if b]
    unknown = [b for b in benches if b not in METRICS]
    if unknown or args.rounds < 1:
        raise SystemExit(f"--benches takes {', '.join(METRICS)}; --rounds at least 1 (given {args.benches!r}, "
                         f"{args.rounds})")
    refs = {label: subprocess.run(["git", "-C", str(REPO), "rev-parse", "--short", ref], check=True,
                                  capture_output=True, text=True).stdout.strip()
            for label, ref in (("before", args.before), ("after", args.after))}
    values: dict[str, dict[str, list[float]]] = {label: {} for label in refs}
    with tempfile.TemporaryDirectory() as tmp:
        trees = {label: worktree(ref, Path(tmp) / label) for label, ref in refs.items()}
        try:
            for round_number in range(args.rounds):
                order = list(trees) if round_number % 2 == 0 else list(reversed(trees))
                for label in order:
                    for bench in benches:
                        for metric, value in run_bench(trees[label], bench, args.quick).items():
                            values[label].setdefault(metric, []).append(round(value, 3))
                print(f"round {round_number + 1} of {args.rounds} done", file=sys.stderr, flush=True)
        finally:
            for folder in trees.values():
                subprocess.run(["git", "-C", str(REPO), "worktree", "remove", "--force", str(folder)], check=False)
    summary = summarize(values, "before", "after")
    print(json.dumps({"before": refs["before"], "after": refs["after"], "rounds": args.rounds, "quick": args.quick,
                      "metrics": summary}, indent=2))


if __name__ == "__main__":
    main()
