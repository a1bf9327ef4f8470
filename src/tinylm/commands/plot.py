"""Draw the loss curves of one or more runs from their metrics.jsonl.

examples:
  tinylm plot runs/tiny-modern                       writes runs/tiny-modern/loss.png
  tinylm plot runs/tiny-modern runs/tiny-classic --out compare.png
"""

from __future__ import annotations

import argparse

HELP = "plot the loss curves of training runs"


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("runs", nargs="+", metavar="RUN_DIR", help="run folder(s) with a metrics.jsonl")
    parser.add_argument("--out", default=None, metavar="FILE", help="PNG to write (default RUN_DIR/loss.png)")
    parser.add_argument("--title", default=None)


def run(args: argparse.Namespace) -> int:
    from tinylm.train.plot import plot_runs

    path = plot_runs(list(args.runs), args.out, args.title)
    print(path)
    return 0
