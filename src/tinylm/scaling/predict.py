"""A prediction, then the run: the fitted law names the best depth for the next budget up and its final dev
loss, writes both down (prediction.json) before training a step, then trains it on several seeds and says how
close it came.

The next budget is the sweep's largest times the ratio of its two largest (one more step of the grid); every
depth of the rule that gets 50 steps there is a candidate, its loss predicted as L(N, D) of the run it would
be (its exact N and D, as budget.py plans them), and the lowest is trained. The interval is the bootstrap's:
the same prediction made by every resampled law.
"""

from __future__ import annotations

import json
import statistics
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from tinylm.bench.result_files import write_result_files
from tinylm.depth import MAX_DEPTH
from tinylm.errors import TinyLMError
from tinylm.scaling.budget import MIN_STEPS, budget_run
from tinylm.scaling.parametric_fit import ParametricFit
from tinylm.scaling.sweep import ScalingOptions, run_points

PREDICTION, PREDICTION_POINTS = "prediction.json", "prediction_points.jsonl"


def next_budget(budgets: list[float]) -> float:
    ordered = sorted(set(budgets))
    if len(ordered) < 2:
        raise TinyLMError("the next budget up is one grid step past the two largest: the sweep needs two budgets "
                          "(or give --budget)")
    return ordered[-1] * ordered[-1] / ordered[-2]


def plan_prediction(fit: ParametricFit, budget: float, arch: str, overrides: dict[str, Any] | None = None
                    ) -> dict[str, Any]:
    """The depth the law expects to do best at `budget`, and the loss it expects, with the bootstrap's interval."""
    candidates = []
    for depth in range(1, MAX_DEPTH + 1):
        run = budget_run(depth, budget, arch, overrides)
        if run.steps < MIN_STEPS:
            break
        candidates.append((fit.law.loss(run.params, run.tokens), run))
    if not candidates:
        raise TinyLMError(f"budget {budget:.3g} FLOPs gives no depth {MIN_STEPS} steps")
    predicted, run = min(candidates, key=lambda c: c[0])
    low, high = fit.interval_of(lambda law: law.loss(run.params, run.tokens))
    return {"budget": budget, "depth": run.depth, "params": run.params, "tokens": run.tokens, "flops": run.flops,
            "steps": run.steps, "predicted_loss": predicted, "predicted_interval": [low, high],
            "candidates": {str(r.depth): loss for loss, r in candidates}, "written_at": time.time()}


def run_prediction(options: ScalingOptions, fit: ParametricFit, budget: float, seeds: list[int],
                   say: Callable[[str], None]) -> dict[str, Any]:
    """Write the prediction, train it on every seed, and add what was measured."""
    out = Path(options.out)
    plan = plan_prediction(fit, budget, options.arch, options.overrides)
    record = out / PREDICTION
    earlier = json.loads(record.read_text(encoding="utf-8")) if record.is_file() else None
    if earlier and (earlier["budget"], earlier["depth"]) == (plan["budget"], plan["depth"]):
        plan = {**earlier, **{k: v for k, v in plan.items() if k not in ("written_at",)}}  # resumed: same plan
    low, high = plan["predicted_interval"]
    say(f"prediction (before training): at {budget:.3g} FLOPs the law's best depth is {plan['depth']} "
        f"({plan['params']:,} params x {plan['tokens']:,} tokens), final dev loss {plan['predicted_loss']:.4f} "
        f"(95% interval {low:.4f}-{high:.4f})")
    _write(out, plan)
    run = budget_run(plan["depth"], budget, options.arch, options.overrides)
    rows = []
    for seed in seeds:
        rows += run_points(options, [run], seed, say, folder_name=lambda r, s=seed: f"predict-{r.name}-s{s}",
                           file=PREDICTION_POINTS)
    losses = [row["loss"] for row in rows]
    mean = statistics.fmean(losses)
    plan.update({"seeds": seeds, "measured": losses, "measured_mean": mean,
                 "measured_spread": max(losses) - min(losses),
                 "measured_std": statistics.stdev(losses) if len(losses) > 1 else 0.0,
                 "error": (plan["predicted_loss"] - mean) / mean})
    _write(out, plan)
    return plan


def _write(out: Path, plan: dict[str, Any]) -> None:
    write_result_files(out, {PREDICTION: json.dumps(plan, indent=2) + "\n"}, {}, "the prediction")
