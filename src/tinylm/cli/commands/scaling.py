"""Scaling laws on this machine: an IsoFLOP sweep, both of Chinchilla's fits, and a prediction checked by a run.

ACTION is one of:
  run       (the default) train every depth of --depths at every budget of --budgets, each for exactly the
            tokens its budget buys (FLOPs as tinylm counts them, attention included), into --out; run again,
            it resumes where it stopped. Then fits the points and writes fit.json, scaling.md and the plots
            (isoflop.png, frontier.png, law.png).
  fit       fit --points FILE (JSONL rows {"params": N, "tokens": D, "loss": L}, "flops" optional), or the
            sweep in --out: Approach 3's law L = E + A/N^alpha + B/D^beta (Huber on log L, bootstrap
            intervals) and, when the points form IsoFLOP curves, Approach 2's parabolas and exponents.
  predict   fit the sweep in --out, predict the best depth and its final dev loss one budget step up (or at
            --budget), write the prediction down, then train it on --seeds and report how close it came.

The depth dial (`tinylm train --depth N`, depth.py) makes the family: width 32N, N blocks, context
256, the AdamW lr as 1/sqrt(width), 4N rows per batch; depth 4 is the `tiny` preset.

examples:
  tinylm scaling                                    the default grid (3 budgets, depths 1-6) into runs/scaling
  tinylm scaling --budgets 1e12,1e13 --depths 1,2,3,4 --out runs/sweep2 --jobs 2
  tinylm scaling fit --points points.jsonl --json   fit points from anywhere
  tinylm scaling predict --seeds 1,2,3              the next budget up, predicted, then trained
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path
from typing import Any

from tinylm.bench.result_files import write_result_files
from tinylm.cli.options import add_config_options, add_option, config_from_args
from tinylm.errors import TinyLMError
from tinylm.options import JSON, SEEDS, Option
from tinylm.scaling.fit import fit_points
from tinylm.scaling.plots import drawings
from tinylm.scaling.points import read_points
from tinylm.scaling.predict import next_budget, run_prediction
from tinylm.scaling.report import fit_lines, points_table, prediction_lines
from tinylm.scaling.sweep import POINTS, SWEEP, ScalingOptions, read_rows, run_sweep

ACTIONS = ("run", "fit", "predict")
HELP = "scaling laws: an IsoFLOP sweep over depths and budgets, Chinchilla's two fits, a prediction then its run"
# options only one action reads: given to another, they are refused (they would be silently ignored)
OPTION_ACTIONS: dict[str, tuple[str, ...]] = {"points": ("fit",), "seeds": ("predict",), "budget": ("predict",),
                                              "bootstrap": ("fit", "predict", "run")}


def add_arguments(parser: argparse.ArgumentParser) -> None:

    parser.add_argument("action", nargs="?", default="run", metavar="ACTION", help=f"one of {', '.join(ACTIONS)}")
    add_config_options(parser, ScalingOptions, checked_here=True)
    add_option(parser, "json", JSON, False, note="(fit, predict: the result instead of the tables)")
    parser.add_argument("--points", metavar="FILE", help="fit: a JSONL file of points (default: the sweep in --out)")
    parser.add_argument("--bootstrap", type=int, metavar="B", help="resamples for the intervals (default 200)")
    add_option(parser, "seeds", SEEDS, None, kind="list", item_kind="int",
               note="predict: one run at the predicted point per seed (default 1,2,3)")
    add_option(parser, "budget", Option("predict: the budget in FLOPs (default: one grid step past the sweep's "
                                        "largest)", low=1e6, high=1e30, metavar="C"), kind="float")


def _check(args: argparse.Namespace) -> None:
    if args.action not in ACTIONS:
        raise TinyLMError(f"scaling: unknown action {args.action!r}: one of {', '.join(ACTIONS)}")
    for name, actions in OPTION_ACTIONS.items():
        if getattr(args, name) is not None and args.action not in actions:
            raise TinyLMError(f"scaling {args.action}: --{name} is for scaling {' / '.join(actions)}")
    if args.bootstrap is not None and not 10 <= args.bootstrap <= 100_000:
        raise TinyLMError("--bootstrap must be in [10, 100000]")


def run(args: argparse.Namespace) -> int:
    _check(args)
    options = config_from_args(ScalingOptions, args)
    if args.action == "fit" and args.points is not None:
        return _fit_and_show(args, args.points, None)
    if args.action == "run":
        run_sweep(options, say=_say)
        try:
            return _fit_and_show(args, None, options)
        except TinyLMError as reason:  # the sweep is done; its points do not (yet) make a law worth printing
            _say(f"scaling: every point is trained; no fit printed: {reason}")
            return 0
    options = _sweep_options(options)
    if args.action == "fit":
        return _fit_and_show(args, None, options)
    return _predict(args, options)


def _say(line: str) -> None:
    print(line, file=sys.stderr, flush=True)


def _sweep_options(options: ScalingOptions) -> ScalingOptions:
    """The options a sweep folder was made with (its arch, data, seed), so predict and fit read it as it is."""

    record = Path(options.out) / SWEEP
    if not record.is_file():
        raise TinyLMError(f"{options.out} holds no sweep ({SWEEP} is missing): run `tinylm scaling --out "
                          f"{options.out}` first, or fit a points file with --points")
    fixed = json.loads(record.read_text(encoding="utf-8"))
    return ScalingOptions(**{**vars(options), **fixed["fixed"], "budgets": fixed["budgets"],
                             "depths": fixed["depths"]})


def _fit_and_show(args: argparse.Namespace, points_file: str | None, options: Any) -> int:

    source = Path(points_file) if points_file else Path(options.out) / POINTS
    points = read_points(source)
    result, _ = fit_points(points, bootstrap=args.bootstrap or 200)
    if args.json:
        print(json.dumps(result, indent=2))
    else:
        print("\n".join(fit_lines(result)))
    if options is not None:  # a sweep folder: its table, fit and pictures beside its points
        out = Path(options.out)
        texts = {"fit.json": json.dumps(result, indent=2) + "\n",
                 "scaling.md": "\n".join(["# Scaling sweep", "", *points_table(read_rows(source)), "",
                                          *fit_lines(result), ""])}
        plots = drawings(points, result)
        write_result_files(out, texts, plots, "the sweep's fit")
        _say(f"wrote {out}/{', '.join([*texts, *plots])}")
    return 0


def _predict(args: argparse.Namespace, options: Any) -> int:

    _, fit = fit_points(read_points(Path(options.out) / POINTS), bootstrap=args.bootstrap or 200)
    budget = args.budget or next_budget(options.budgets)
    plan = run_prediction(options, fit, budget, args.seeds or [1, 2, 3], _say)
    print(json.dumps(plan, indent=2) if args.json else "\n".join(prediction_lines(plan)))
    return 0

