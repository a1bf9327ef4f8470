"""Evaluate a checkpoint: bits per byte, verifiable tasks (exact-match, pass@k), multiple choice, preferences.

Offline on local files and the built-in tasks, deterministic for a --seed. The scores are printed
(a table, or one JSON object with --json), appended to the run's evals.jsonl and written into its
report card (report.md, report.html).

tasks (comma-separated):
  bpb | bpb:DIR                         bits per byte on the pretraining corpus's dev split (or DIR's)
  builtin:TASK                          a task of tasks/registry.py (arith, docstring, code, gsm8k?file=F):
                                        its held-out split, greedy exact-match; --pass-k K adds pass@K
  code                                  builtin:code: small functions, checked by their tests in the sandbox
  gsm8k:FILE                            GSM8K-layout JSONL (the answer after ####), every row held out
  hellaswag:FILE, arc:FILE, mmlu:FILE   multiple choice by log-likelihood (acc, acc_norm; `core` over them)
  prefs:builtin:arith                   preference accuracy on held-out verified pairs
  prefs:FILE                            ... on your pairs: JSONL/JSON/CSV rows of prompt, chosen, rejected
  FILE may be hf:NAME[:CONFIG][:SPLIT] with a network (split test unless named).

examples:
  tinylm eval --checkpoint runs/tiny-modern --tasks bpb
  tinylm eval --checkpoint runs/tiny-modern-sft --tasks bpb,builtin:arith,prefs:builtin:arith --json
  tinylm eval --checkpoint runs/tiny-modern-sft --tasks builtin:arith,code --pass-k 4 --samples 8
  tinylm eval --checkpoint runs/tiny-modern --tasks hellaswag:evals/data/synthetic_hellaswag.jsonl,arc:FILE
"""

from __future__ import annotations

import argparse
import json
import sys

from tinylm.cli.options import add_config_options, add_option, config_from_args
from tinylm.evaluate.report_card import write_report_card
from tinylm.evaluate.scores import evaluate_checkpoint, record
from tinylm.evaluate.tasks import EvalOptions, parse_tasks
from tinylm.options import CHECKPOINT, JSON, Option
from tinylm.stages import report_curves

HELP = "bits per byte, verifiable tasks, multiple choice, preference accuracy; JSON"
TASKS = Option("comma-separated task specs (see above)", metavar="LIST", required=True)
RECORD = Option("do not append the scores to the run's evals.jsonl and report card", flag="--no-record")


def add_arguments(parser: argparse.ArgumentParser) -> None:
    add_option(parser, "checkpoint", CHECKPOINT)
    add_option(parser, "tasks", TASKS)
    add_config_options(parser, EvalOptions, checked_here=True)
    add_option(parser, "record", RECORD, True)
    add_option(parser, "json", JSON, False)


def format_scores(scores: dict[str, dict[str, float]]) -> str:
    width = max(len(task) for task in scores)
    return "\n".join(f"{task:<{width}}  " + "  ".join(f"{name} {value:.4f}" for name, value in metrics.items())
                     for task, metrics in scores.items())


def run(args: argparse.Namespace) -> int:
    tasks = parse_tasks(args.tasks)  # every spec and file checked before the model loads
    options = config_from_args(EvalOptions, args)
    evaluation = evaluate_checkpoint(args.checkpoint, tasks, options)
    for note in evaluation.notes:
        print(note, file=sys.stderr)
    report = None
    if args.record:
        report = write_report_card(record(evaluation), report_curves)
    if args.json:
        print(json.dumps(evaluation.to_dict()))
        return 0
    print(f"{evaluation.checkpoint} (step {evaluation.step}, {evaluation.stage}), {evaluation.wall_s:.1f} s")
    print(format_scores(evaluation.scores()))
    if report is not None:
        print(f"report card: {report}")
    return 0
