"""Does the depth rule's learning rate transfer? The same budget's learning-rate grid at three depths.

    python benchmarks/scaling_lr.py --out /tmp/scaling-lr [--depths 1 2 3] [--budget 1e12]
                                    [--multipliers 0.25 0.5 1 2 4]

Each depth trains at the budget (scaling/budget.py: the steps whose FLOPs are nearest it) with both of the
rule's learning rates (Muon's and AdamW's) times each multiplier, seed 1. If the rule's scaling is right, the
best multiplier is the same at every depth, within one step of the grid (a factor of 2). Prints one JSON
object: the final dev loss of every (depth, multiplier), the best multiplier per depth and whether they agree.
Every run is an ordinary run folder in --out/d{depth}-x{multiplier} (a second invocation resumes).
"""

from __future__ import annotations

import argparse
import json
import math
import sys

from tinylm.depth import DepthRule
from tinylm.scaling.budget import budget_run
from tinylm.scaling.sweep import ScalingOptions, run_points


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", required=True)
    parser.add_argument("--depths", type=int, nargs="+", default=[1, 2, 3])
    parser.add_argument("--budget", type=float, default=1e12)
    parser.add_argument("--multipliers", type=float, nargs="+", default=[0.25, 0.5, 1.0, 2.0, 4.0])
    args = parser.parse_args()
    losses: dict[int, dict[float, float]] = {}
    for depth in args.depths:
        rule, run = DepthRule(depth), budget_run(depth, args.budget)
        losses[depth] = {}
        for multiplier in args.multipliers:
            options = ScalingOptions(out=args.out, depths=[1, 2, 3],
                                     train={"lr": rule.adamw_lr * multiplier, "muon_lr": rule.muon_lr * multiplier})
            row = run_points(options, [run], 1, lambda line: print(line, file=sys.stderr, flush=True),
                             folder_name=lambda r, m=multiplier: f"d{r.depth}-x{m:g}")[0]
            losses[depth][multiplier] = row["loss"]
    best = {depth: min(by, key=by.get) for depth, by in losses.items()}
    steps = [math.log2(m) for m in best.values()]
    print(json.dumps({"budget": args.budget, "multipliers": args.multipliers,
                      "losses": {str(d): {f"{m:g}": v for m, v in by.items()} for d, by in losses.items()},
                      "best_multiplier": {str(d): m for d, m in best.items()},
                      "optimum_within_one_grid_step": max(steps) - min(steps) <= 1.0}, indent=2))


if __name__ == "__main__":
    main()
