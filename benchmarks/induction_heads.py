"""Induction heads forming in a two-block `tiny` model on the demo corpus, over seeds: is there a phase change?

    python benchmarks/induction_heads.py --out /tmp/induction [--seeds 1 2 3] [--steps 3000] [--every 50] \
        [any other `tinylm train` option, e.g. --schedule wsd]

For each seed: `tinylm train` on the embedded corpus (the demo's data) with `--set n_blocks=2` and
`--snapshot-every`, then `tinylm inspect induction --json` on the run. The head that ends with the highest
induction score is followed through training; its phase change is the stretch of a tenth of training
(`--window` snapshots) over which its score rises most. The phase change "appears" when the head ends that window an
induction head (at least 5 times the score of uniform attention, 0.011 here), the window holds at least
half of the head's whole rise, and the in-context-learning score falls within the same window by at
least a third of its whole fall (Olsson et al. 2022: both move together, in a short stretch of
training). Prints one JSON object and draws `induction-heads.png` in --out (every seed's best head and
ICL score by step).
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
from pathlib import Path

SEQUENCE = 64  # tokens repeated twice in `tinylm inspect induction` (interpret/induction.py) at context 256
FLOOR = 5  # an induction head attends at least 5 times as much to the token after the earlier copy as chance


def tinylm(*args: str) -> str:
    done = subprocess.run([sys.executable, "-m", "tinylm", *args], capture_output=True, text=True)
    if done.returncode:
        raise SystemExit(f"tinylm {' '.join(args)} failed:\n{done.stderr[-2000:]}")
    return done.stdout


def chance(n: int) -> float:
    """The induction score of a head attending uniformly: query n + i sees n + i + 1 keys."""
    return sum(1 / (n + i + 1) for i in range(n - 1)) / (n - 1)


def phase_change(steps: list[int], head: list[float], icl: list[float], window: int,
                 floor: float) -> dict[str, float | int | bool]:
    """The `window`-snapshot stretch where the head's induction score rises most, and what ICL does there.
    A head below `floor` after it is no induction head, whatever its curve does."""
    best = max(range(len(steps) - window), key=lambda i: head[i + window] - head[i])
    rise, total_rise = head[best + window] - head[best], max(head) - head[0]
    fall, total_fall = icl[best] - icl[best + window], icl[0] - min(icl)
    return {"from_step": steps[best], "to_step": steps[best + window], "induction_before": head[best],
            "induction_after": head[best + window], "rise_share": rise / total_rise if total_rise > 0 else 0.0,
            "icl_before": icl[best], "icl_after": icl[best + window],
            "icl_fall_share": fall / total_fall if total_fall > 0 else 0.0,
            "appears": head[best + window] >= floor and rise >= 0.5 * total_rise and total_fall > 0
            and fall >= total_fall / 3}


def rise_span(steps: list[int], head: list[float], icl: list[float]) -> dict[str, float | int]:
    """The same rise read as Olsson et al. read theirs, on a log-scale step axis (their small models' phase
    change runs from about 2.5 to 5 billion tokens, a factor of 2): the snapshots where the head first
    passes a tenth and nine tenths of its rise from its lowest point to its highest, how many times more
    steps the second is than the first, and the share of ICL's fall after the first tenth of training
    (before it, every position's loss is still falling from chance, and the ICL score with it) that lands
    between the two."""
    peak = max(range(len(head)), key=head.__getitem__)
    trough = min(range(peak + 1), key=head.__getitem__)  # heads first learn to look elsewhere, then rise
    low, top = head[trough], head[peak]
    first = [next(i for i in range(trough, peak + 1) if head[i] >= low + share * (top - low)) for share in (0.1, 0.9)]
    settled = next(i for i, s in enumerate(steps) if s >= steps[-1] / 10)
    start, end = max(first[0], settled), max(first[1], settled)
    fall = icl[settled] - min(icl[settled:])
    return {"tenth_step": steps[first[0]], "nine_tenths_step": steps[first[1]],
            "steps_ratio": steps[first[1]] / steps[first[0]],
            "icl_fall_share_in_span": (icl[start] - icl[end]) / fall if fall > 0 else 0.0}


def draw(curves: dict[int, dict], out: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, (top, bottom) = plt.subplots(2, 1, figsize=(8, 6), sharex=True)
    for seed, curve in curves.items():
        layer, head = curve["best_head"]
        scores = [c[layer][head] for c in curve["induction"]]
        line = top.plot(curve["steps"], scores, label=f"seed {seed}: L{layer}H{head}")[0]
        bottom.plot(curve["steps"], curve["icl"], color=line.get_color(), label=f"seed {seed}")
        change = curve["phase_change"]
        if change["appears"]:
            for axis in (top, bottom):
                axis.axvspan(change["from_step"], change["to_step"], color=line.get_color(), alpha=0.12)
    top.set_ylabel("induction score\n(best head)")
    bottom.set_ylabel("in-context learning score\n(late - early loss)")
    bottom.set_xlabel("step")
    top.legend(fontsize=8)
    top.set_title("two-block tiny model on the demo corpus: induction heads forming")
    fig.tight_layout()
    fig.savefig(out / "induction-heads.png", dpi=110)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--out", type=Path, required=True)
    parser.add_argument("--seeds", type=int, nargs="+", default=[1, 2, 3])
    parser.add_argument("--steps", type=int, default=3000)
    parser.add_argument("--every", type=int, default=50, help="steps between snapshots")
    parser.add_argument("--window", type=int, default=None,
                        help="snapshots in a phase-change window (default: a tenth of the run)")
    parser.add_argument("--threads", type=int, default=None, help="per run (several instances can share a machine)")
    parser.add_argument("--depth", type=int, default=None,
                        help="two blocks of `--depth N`'s model (the scaling rule's width, heads, batch and rates: "
                             "docs/scaling.md) instead of `tiny`'s")
    parser.add_argument("--windows", type=int, default=64,
                        help="dev windows each ICL score reads (`tinylm inspect induction --windows`)")
    args, train_args = parser.parse_known_args()
    args.window = args.window or max(2, round(args.steps / 10 / args.every))
    data = args.out / "data"
    if not (data / "train.bin").is_file():
        tinylm("prepare", "--out", str(data), "--no-progress")
    curves = {}
    for seed in args.seeds:
        run = args.out / f"seed{seed}"
        if not (run / "checkpoints").is_dir():
            shape = ["--depth", str(args.depth)] if args.depth else []
            tinylm("train", "--data", str(data), "--out", str(run), *shape, "--set", "n_blocks=2", "--seed", str(seed),
                   "--max-steps", str(args.steps), "--snapshot-every", str(args.every), "--no-progress",
                   *(["--threads", str(args.threads)] if args.threads else []), *train_args)
        curve = json.loads(tinylm("inspect", "induction", "--checkpoint", str(run), "--windows", str(args.windows),
                                  "--json"))
        layer, head = curve["best_head"]
        scores = [c[layer][head] for c in curve["induction"]]
        curve["phase_change"] = phase_change(curve["steps"], scores, curve["icl"], args.window,
                                             FLOOR * chance(SEQUENCE))
        curve["phase_change"]["span"] = rise_span(curve["steps"], scores, curve["icl"])
        curves[seed] = curve
        print(json.dumps({"seed": seed, "best_head": curve["best_head"], **curve["phase_change"]}), file=sys.stderr)
    draw(curves, args.out)
    print(json.dumps({"depth": args.depth, "train_args": train_args, "windows": args.windows, "steps": args.steps,
                      "every": args.every, "window": args.window,
                      "induction_floor": FLOOR * chance(SEQUENCE),
                      "appears_in": sum(c["phase_change"]["appears"] for c in curves.values()),
                      "seeds": {s: {"best_head": c["best_head"], **c["phase_change"]} for s, c in curves.items()},
                      "curves": {s: {k: c[k] for k in ("steps", "induction", "icl")} for s, c in curves.items()}}))


if __name__ == "__main__":
    main()
