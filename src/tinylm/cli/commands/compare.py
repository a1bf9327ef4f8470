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
from tinylm.cli.options import add_config_options, config_from_args

HELP = "train several architectures on the same data and budget; table + plot"


def add_arguments(parser: argparse.ArgumentParser) -> None:
    add_config_options(parser, CompareOptions, checked_here=True)


def run(args: argparse.Namespace) -> int:
    options = config_from_args(CompareOptions, args)
    result = run_compare(options, say=lambda line: print(line, file=sys.stderr))
    print(format_markdown(result))
    print(f"wrote {options.out}/compare.md, compare.png, compare.json", file=sys.stderr)
    return 0
