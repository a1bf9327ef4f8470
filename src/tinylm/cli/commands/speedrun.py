"""Race training recipes to a dev bits-per-byte target against a reference trained in the same invocation.

Each recipe is changes to `tinylm train`'s defaults joined by '+': a named change ({changes}) or
FIELD=VALUE for any training option or model field. `record` is the best recipe of the record table
(docs/speedrun.md), today's default; the reference is, unless --against, `adamw-default`, the default
before it. Every run gets the reference's token budget; the target is where the reference
ends it (or --target-bpb). Runs alternate seed by seed, so the ratio holds on a busy machine.
Writes speedrun.md, speedrun.json (`time_to_target_ratio`: recipe over reference, median of the
seeds) and speedrun.png (dev bpb against training seconds) into --out.

examples:
  tinylm speedrun                                        the record recipe against the AdamW default, 3 seeds
  tinylm speedrun --recipe wsd,qknorm --seeds 1,2        two changes to the default, one reference run per seed
  tinylm speedrun --against nanogpt --recipe default     today's default against the GPT-2-style baseline
  tinylm speedrun --recipe muon_lr=0.04 --target-bpb 1.9 --steps 300
"""

from __future__ import annotations

import argparse
import json
import sys

from tinylm.bench.recipes import CHANGES, REFERENCE
from tinylm.bench.speedrun import SpeedrunOptions, run_speedrun
from tinylm.bench.speedrun_report import format_markdown
from tinylm.cli import option_types
from tinylm.cli.option_types import bounded_float, bounded_int
from tinylm.cli.options import add_config_option, add_option
from tinylm.config import parse_override
from tinylm.options import DEVICE, DTYPE, THREADS
from tinylm.train.config import DEMO_STEPS, TrainConfig

__doc__ = __doc__.format(changes=", ".join(CHANGES))  # the named changes as recipes.py defines them

HELP = "race training recipes to a dev bpb target against a reference; table, JSON and plot"


def _recipes(text: str) -> list[str]:
    parts = [part.strip() for part in text.split(",") if part.strip()]
    if not parts:
        raise argparse.ArgumentTypeError("expected a comma list of recipes, e.g. wsd,wsd+qknorm")
    return parts


def add_arguments(parser: argparse.ArgumentParser) -> None:
    add_config_option(parser, TrainConfig, "preset")
    parser.add_argument("--recipe", type=_recipes, default=["record"], metavar="R[,R...]",
                        help="recipes to race, comma-separated; each is changes joined by '+' (default: record)")
    parser.add_argument("--against", default=REFERENCE, metavar="R",
                        help=f"the reference recipe, trained beside them (default: {REFERENCE}, tinylm train's "
                             "defaults before the record became them)")
    parser.add_argument("--target-bpb", type=bounded_float(0, low_open=True), default=None, metavar="X",
                        help="dev bits per byte to reach (default: where the reference ends, seed by seed)")
    parser.add_argument("--stop-at-target", action="store_true",
                        help="end every run at its first evaluation at or below --target-bpb (a quicker screen; "
                             "the final dev bpb is then where each run stopped)")
    parser.add_argument("--seeds", type=option_types.seed_list, default=[1, 2, 3],
                        help="comma list of seeds in [0, 2**32) (default: 1,2,3)")
    parser.add_argument("--steps", type=bounded_int(1, 10**9), default=DEMO_STEPS,
                        help=f"the reference's budget in its steps; every run gets as many tokens (default: "
                             f"{DEMO_STEPS})")
    parser.add_argument("--eval-every", type=bounded_int(1, 10**9), default=20,
                        help="reference steps between dev evaluations; other batches evaluate at the same tokens "
                             "(default: 20)")
    add_config_option(parser, TrainConfig, "eval_batches")
    add_config_option(parser, TrainConfig, "overrides", note="for every run")
    add_config_option(parser, TrainConfig, "data")
    parser.add_argument("--out", default="speedrun", help="output folder (default: ./speedrun)")
    add_option(parser, "device", DEVICE, "auto")
    add_option(parser, "dtype", DTYPE, "auto", note="auto: the reference's first run decides, every run keeps it")
    add_config_option(parser, TrainConfig, "compile",
                      note="auto: the reference's first run decides, every run keeps it")
    add_option(parser, "threads", THREADS, kind="int")
    parser.add_argument("--json", action="store_true", help="print speedrun.json's summary instead of the table")


def run(args: argparse.Namespace) -> int:
    train = {"data": args.data, "eval_batches": args.eval_batches, "device": args.device, "dtype": args.dtype,
             "compile": args.compile, "threads": args.threads,
             "overrides": dict(parse_override(t) for t in args.overrides)}
    options = SpeedrunOptions(preset=args.preset, recipes=args.recipe, against=args.against,
                              target_bpb=args.target_bpb, stop_at_target=args.stop_at_target, seeds=args.seeds,
                              steps=args.steps, eval_every=args.eval_every, out=args.out, train=train)
    result = run_speedrun(options, say=lambda line: print(line, file=sys.stderr))
    if args.json:
        print(json.dumps({k: v for k, v in result.items() if k != "runs"}, indent=2))
    else:
        print(format_markdown(result))
    print(f"wrote {args.out}/speedrun.md, speedrun.json, speedrun.png", file=sys.stderr)
    return 0
