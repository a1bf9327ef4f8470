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

from tinylm.bench.compare import CompareOptions, format_markdown, run_compare
from tinylm.cli import option_types
from tinylm.cli.option_types import bounded_int
from tinylm.cli.options import add_config_option, add_option
from tinylm.config import parse_override
from tinylm.options import BATCH_SIZE, DEVICE, DTYPE, THREADS
from tinylm.train.config import TrainConfig

HELP = "train several architectures on the same data and budget; table + plot"


def _names(text: str) -> list[str]:
    return [part.strip() for part in text.split(",") if part.strip()]


def add_arguments(parser: argparse.ArgumentParser) -> None:
    add_config_option(parser, TrainConfig, "preset")
    parser.add_argument("--archs", default="classic,modern", help="comma list of classic,modern (may be empty)")
    parser.add_argument("--variants", default="", help="comma list of modern variants, e.g. gqa,mqa,mla,moe")
    add_config_option(parser, TrainConfig, "overrides", note="for every candidate")
    budget = parser.add_mutually_exclusive_group()
    budget.add_argument("--steps", type=bounded_int(1, 10**9), default=None,
                        help="equal steps for every run (default: 200)")
    add_config_option(budget, TrainConfig, "time_budget", note="the same for every run")
    parser.add_argument("--seeds", type=option_types.seed_list, default=[1],
                        help="comma list of seeds in [0, 2**32) (default: 1)")
    parser.add_argument("--out", default="compare", help="output folder (default: ./compare)")
    parser.add_argument("--data", default=None, help="prepared data folder (default: the embedded corpus)")
    add_option(parser, "batch_size", BATCH_SIZE, 16)
    for name, default in (("seq_len", None), ("lr", None), ("eval_every", 50), ("eval_batches", 20), ("log_every", 10)):
        add_config_option(parser, TrainConfig, name, default)
    add_option(parser, "device", DEVICE, "auto")
    add_option(parser, "dtype", DTYPE, "auto")
    add_option(parser, "threads", THREADS, kind="int")


def run(args: argparse.Namespace) -> int:

    seeds = args.seeds
    steps = args.steps if args.steps is not None or args.time_budget is not None else 200
    train = {"data": args.data, "batch_size": args.batch_size, "seq_len": args.seq_len, "lr": args.lr,
             "eval_every": args.eval_every, "eval_batches": args.eval_batches, "log_every": args.log_every,
             "device": args.device, "dtype": args.dtype, "threads": args.threads}
    options = CompareOptions(preset=args.preset, archs=_names(args.archs), variants=_names(args.variants),
                             overrides=dict(parse_override(t) for t in args.overrides), steps=steps,
                             time_budget=args.time_budget, seeds=seeds, out=args.out, train=train)
    result = run_compare(options, say=lambda line: print(line, file=sys.stderr))

    print(format_markdown(result))
    print(f"wrote {args.out}/compare.md, compare.png, compare.json", file=sys.stderr)
    return 0
