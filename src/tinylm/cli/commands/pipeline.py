"""The whole road in one command: prepare -> pretrain -> SFT -> DPO -> GRPO -> eval, then the stage table.

Offline, on the embedded corpus and the built-in task (default builtin:arith?digits=2&ops=+), with a
tiny model: about 9 minutes on two CPU cores. Each stage runs in its own folder under --out
(pretrain, sft, dpo, grpo) with its own report card; OUT/report.html holds the stage table. Running
the command again skips the finished stages and resumes an interrupted one where it stopped.

FILE is a TOML file with one table per stage ([prepare], [pretrain], [sft], [dpo], [grpo], [eval]),
whose keys are that stage's options; an unknown key is refused. See docs/pipeline-command.md.

examples:
  tinylm pipeline                                   the default road into runs/pipeline
  tinylm pipeline my-road.toml --out runs/road2     changed stages, another folder
  tinylm pipeline --seed 2 --dtype fp32             another seed, in fp32
  tinylm pipeline --threads 2 --json                the stage table as JSON
"""

from __future__ import annotations

import argparse
import json
import shlex
from pathlib import Path

from tinylm.cli.options import add_option
from tinylm.options import DTYPE, JSON, PROGRESS, SEED, THREADS
from tinylm.pipeline.config import load_pipeline_config
from tinylm.pipeline.road import run_pipeline
from tinylm.pipeline.table import format_table, table_rows, write_pipeline_card

# the command's own flags (--out, --seed...) from a file, as every command has; the road's tables are FILE's
CONFIG_HELP = ("this command's own flags (--out, --seed, --dtype...) from a TOML or JSON file, as every command "
               "takes them; the stage tables ([pretrain], [sft]...) go in the positional FILE")
HELP = "prepare -> pretrain -> SFT -> DPO -> GRPO -> eval, resumable, with a stage table and report card"


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("file", nargs="?", metavar="FILE", help="TOML file of stage settings (see above)")
    parser.add_argument("--out", default=None, metavar="DIR", help="pipeline folder (default: the file's, or "
                        "runs/pipeline)")
    add_option(parser, "seed", SEED, kind="int", note="for every stage (default: the file's, or 1337)")
    add_option(parser, "dtype", DTYPE, note="for every stage but RL, which trains in fp32 unless its [grpo] table "
               "says (default: the file's, or each stage's own: auto)")
    add_option(parser, "threads", THREADS, kind="int", note="for every stage")
    add_option(parser, "progress", PROGRESS, True, note="in any stage")
    add_option(parser, "json", JSON, False, note="the result")


def resume_command(args: argparse.Namespace) -> str:
    """The command line that resumes this pipeline: the same file and options, since a stage resumes only
    under the settings it began with and --out says where it is."""
    words = ["tinylm", "pipeline", *([args.file] if args.file else [])]
    if getattr(args, "config", None):
        words += ["--config", args.config]
    if args.out:
        words += ["--out", args.out]
    for flag in ("seed", "dtype", "threads"):
        if getattr(args, flag) is not None:
            words += [f"--{flag}", str(getattr(args, flag))]
    if not args.progress:
        words.append("--no-progress")
    if args.json:
        words.append("--json")
    return shlex.join(words)


def run(args: argparse.Namespace) -> int:
    config = load_pipeline_config(args.file)
    if args.out:
        config.out = args.out
    if args.threads:
        config.threads = args.threads
    if args.seed is not None:
        config.seed = args.seed
    if args.dtype is not None:
        config.dtype = args.dtype
    if not args.progress:
        for stage in ("pretrain", "sft", "dpo", "grpo"):
            config.sections[stage]["progress"] = False
    result = run_pipeline(config, progress=args.progress)
    if result.stopped is not None:
        print(f"pipeline stopped in {result.stopped}: run `{resume_command(args)}` to resume it")
        return 130
    header, cells = table_rows(result.rows, config.task, result.held_out)
    final_run = Path(result.rows[-1]["checkpoint"]).parent.parent
    card = write_pipeline_card(Path(result.out), header, cells, result.wall_s, final_run)
    if args.json:
        print(json.dumps({**result.to_dict(), "report": str(card)}))
        return 0
    print(f"\n{format_table(header, cells)}\n")
    print(f"total wall time {result.wall_s:.0f} s (ran: {', '.join(result.ran) or 'nothing'}; "
          f"skipped: {', '.join(result.skipped) or 'nothing'})")
    print(f"report card: {card}")
    print(f"next: tinylm chat --checkpoint {final_run}")
    return 0
