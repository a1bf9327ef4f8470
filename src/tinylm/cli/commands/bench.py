"""Measure training and decoding speed next to Hugging Face `transformers`, in one process.

Prints a table, or with --json one JSON object with every sample. The matmul peak is the MFU
denominator on a CPU; on a GPU MFU is against the datasheet peak and the measured one is shown too.
Ratios (tinylm / reference) are the headline: both sides are measured in alternation in this run,
with the same batch, threads and dtype, so machine noise slows both alike.

examples:
  tinylm bench --preset tiny --threads 2
  tinylm bench --preset 13m --arch classic --batch-size 16 --only train
  tinylm bench --preset 124m --device cuda --dtype bf16 --compile --json
  tinylm bench --preset small --batch-size 8 --only train --dtype auto --out bench.json
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

from tinylm.bench.suite import BenchOptions, format_table, run_bench
from tinylm.cli.options import add_config_options, add_option, config_from_args
from tinylm.errors import TinyLMError
from tinylm.options import JSON, Option

HELP = "throughput and MFU, side by side with transformers"
OUT = Option("also write the JSON here", metavar="FILE")


def add_arguments(parser: argparse.ArgumentParser) -> None:
    add_config_options(parser, BenchOptions, checked_here=True)
    add_option(parser, "json", JSON, False, note="instead of the table")
    add_option(parser, "out", OUT)


def run(args: argparse.Namespace) -> int:
    options = config_from_args(BenchOptions, args)
    result = run_bench(options, say=lambda line: print(line, file=sys.stderr))
    text = json.dumps(result, indent=2)
    print(text if args.json else format_table(result))
    if args.out:
        write_result(Path(args.out), text)
    return 0


def write_result(path: Path, text: str) -> None:
    """The --out copy of the JSON; a folder that is missing, read-only or full is one line, not a traceback."""
    try:
        path.write_text(text + "\n", encoding="utf-8")
    except OSError as exc:
        raise TinyLMError(f"cannot write --out {path}: {exc.strerror or exc} (the results are printed above)") from None
