"""Draw the loss curves of one or more runs from their metrics.jsonl.

examples:
  tinylm plot runs/tiny-modern                       writes runs/tiny-modern/loss.png
  tinylm plot runs/tiny-modern runs/tiny-classic --out compare.png
  tinylm plot --rl runs/grpo-s1 runs/grpo-s2 --out rl.png   exact-match, reward, KL, informative groups
"""

from __future__ import annotations

import argparse

from tinylm.stages.rl.plot import plot_rl_runs
from tinylm.train.plot import plot_runs

HELP = "plot the loss curves of training runs"


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("runs", nargs="+", metavar="RUN_DIR", help="run folder(s) with a metrics.jsonl")
    parser.add_argument("--out", default=None, metavar="FILE", help="PNG to write (default RUN_DIR/loss.png)")
    parser.add_argument("--title", default=None)
    parser.add_argument("--rl", action="store_true",
                        help="RL runs: held-out exact-match, reward, KL and informative groups against seconds "
                             "(an RL loss hovers near 0 and says little; default RUN_DIR/rl.png)")


def run(args: argparse.Namespace) -> int:
    if args.rl:
        print(plot_rl_runs(list(args.runs), args.out))
        return 0

    path = plot_runs(list(args.runs), args.out, args.title)
    print(path)
    return 0
