"""Race training recipes to a dev bits-per-byte target against a reference trained in the same invocation.

Each recipe is changes to `tinylm train`'s defaults joined by '+': a named change ({changes}) or
FIELD=VALUE for any training option or model field. `record` is the best recipe of the record table
(docs/speedrun.md), today's default; the reference is, unless --against, `adamw-default`, the default
before it. Every run gets the reference's token budget; the target is where the reference
ends it (or --target-bpb). Runs alternate seed by seed, so the ratio holds on a busy machine.
Writes speedrun.md, speedrun.json (`time_to_target_ratio`: recipe over reference, median of the
seeds) and speedrun.png (dev bpb against training seconds) into --out; an --out that holds a speedrun
already is refused unless --overwrite. Every warmup (lr, sequence, batch ramp) is at most a quarter of its
run's steps, so a short --steps race is not all warmup; the speedrun says which it shortened. A speedrun
does not resume: one stopped by Ctrl-C is run again from the start.

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

from tinylm.bench.recipes import CHANGES
from tinylm.bench.speedrun import SpeedrunOptions, run_speedrun
from tinylm.bench.speedrun_report import format_markdown
from tinylm.cli.options import add_config_options, add_option, config_from_args
from tinylm.options import JSON

__doc__ = __doc__.format(changes=", ".join(CHANGES))  # the named changes as recipes.py defines them

HELP = "race training recipes to a dev bpb target against a reference; table, JSON and plot"


def add_arguments(parser: argparse.ArgumentParser) -> None:
    add_config_options(parser, SpeedrunOptions, checked_here=True)
    add_option(parser, "json", JSON, False, note="speedrun.json's summary, instead of the table")


def run(args: argparse.Namespace) -> int:
    options = config_from_args(SpeedrunOptions, args)
    result = run_speedrun(options, say=lambda line: print(line, file=sys.stderr))
    if args.json:
        print(json.dumps({k: v for k, v in result.items() if k != "runs"}, indent=2))
    else:
        print(format_markdown(result))
    print(f"wrote {options.out}/speedrun.md, speedrun.json, speedrun.png", file=sys.stderr)
    return 0
