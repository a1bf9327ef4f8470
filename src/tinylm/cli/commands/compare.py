"""Train several architectures or building blocks on the same data, seeds and budget, then compare them.

Candidates are the baseline of each --archs entry plus one modern model per --variants entry
(mha, gqa, mqa, mla, moe, window, gated, qknorm; see tinylm/bench/variants.py). Every run goes
through the same training engine as `tinylm train`. The budget is equal steps (--steps) or equal
wall time (--time-budget). Writes compare.md, compare.png and compare.json into --out.

examples:
  tinylm compare --preset tiny --archs classic,modern --steps 200 --seeds 1,2,3
  tinylm compare --preset tiny --archs modern --variants mqa,mla,moe --time-budget 60
"""

from __future__ import annotations

import argparse
import sys

from tinylm.cli import option_types
from tinylm.cli.option_types import bounded_float, bounded_int

HELP = "train several architectures on the same data and budget; table + plot"


def _names(text: str) -> list[str]:
    return [part.strip() for part in text.split(",") if part.strip()]


def add_arguments(parser: argparse.ArgumentParser) -> None:
    from tinylm.presets import PRESETS

    parser.add_argument("--preset", default="tiny", choices=PRESETS)
    parser.add_argument("--archs", default="classic,modern", help="comma list of classic,modern (may be empty)")
    parser.add_argument("--variants", default="", help="comma list of modern variants, e.g. gqa,mqa,mla,moe")
    parser.add_argument("--set", dest="overrides", action="append", default=[], metavar="NAME=VALUE",
                        help="change a model field for every candidate (repeatable)")
    budget = parser.add_mutually_exclusive_group()
    budget.add_argument("--steps", type=bounded_int(1, 10**9), default=None,
                        help="equal steps for every run (default: 200)")
    budget.add_argument("--time-budget", type=bounded_float(0, low_open=True), default=None, metavar="SECONDS",
                        help="equal seconds of training for every run")
    parser.add_argument("--seeds", type=option_types.seed_list, default=[1],
                        help="comma list of seeds in [0, 2**32) (default: 1)")
    parser.add_argument("--out", default="compare", help="output folder (default: ./compare)")
    parser.add_argument("--data", default=None, help="prepared data folder (default: the embedded corpus)")
    parser.add_argument("--batch-size", type=bounded_int(1, 2**16), default=16)
    parser.add_argument("--seq-len", type=bounded_int(2, 2**20), default=None)
    parser.add_argument("--lr", type=bounded_float(0, low_open=True), default=3e-3)
    parser.add_argument("--eval-every", type=bounded_int(0, 10**9), default=50, help="0 = only at the end")
    parser.add_argument("--eval-batches", type=bounded_int(1, 10**6), default=20)
    parser.add_argument("--log-every", type=bounded_int(1, 10**9), default=10)
    parser.add_argument("--device", default="auto")
    parser.add_argument("--dtype", default="auto")
    parser.add_argument("--threads", type=option_types.threads, default=None)


def run(args: argparse.Namespace) -> int:
    from tinylm.bench.compare import CompareOptions, run_compare
    from tinylm.config import parse_override

    seeds = args.seeds
    steps = args.steps if args.steps is not None or args.time_budget is not None else 200
    train = {"data": args.data, "batch_size": args.batch_size, "seq_len": args.seq_len, "lr": args.lr,
             "eval_every": args.eval_every, "eval_batches": args.eval_batches, "log_every": args.log_every,
             "device": args.device, "dtype": args.dtype, "threads": args.threads}
    options = CompareOptions(preset=args.preset, archs=_names(args.archs), variants=_names(args.variants),
                             overrides=dict(parse_override(t) for t in args.overrides), steps=steps,
                             time_budget=args.time_budget, seeds=seeds, out=args.out, train=train)
    result = run_compare(options, say=lambda line: print(line, file=sys.stderr))
    from tinylm.bench.compare import format_markdown

    print(format_markdown(result))
    print(f"wrote {args.out}/compare.md, compare.png, compare.json", file=sys.stderr)
    return 0
