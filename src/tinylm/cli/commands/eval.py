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
  FILE may be hf:NAME?config=C&split=S with a network.

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

from tinylm.cli.option_types import bounded_int, count
from tinylm.cli.options import add_option
from tinylm.evaluate.report_card import write_report_card
from tinylm.evaluate.scores import evaluate_checkpoint, record
from tinylm.evaluate.tasks import EvalOptions, parse_tasks
from tinylm.options import BATCH_SIZE, CHECKPOINT, JSON, MAX_NEW_TOKENS, SEED, TEMPERATURE

HELP = "bits per byte, verifiable tasks, multiple choice, preference accuracy; JSON"


def add_arguments(parser: argparse.ArgumentParser) -> None:
    add_option(parser, "checkpoint", CHECKPOINT)
    parser.add_argument("--tasks", required=True, metavar="LIST", help="comma-separated task specs (see above)")
    parser.add_argument("--examples", type=count, default=200,
                        help="problems / questions / pairs per task, at most (default %(default)s)")
    add_option(parser, "seed", SEED, 0)
    add_option(parser, "batch_size", BATCH_SIZE, 32)
    add_option(parser, "max_new_tokens", MAX_NEW_TOKENS, 32)
    parser.add_argument("--pass-k", type=bounded_int(0, 1000), default=0, metavar="K",
                        help="also pass@K for generative tasks, from sampled replies")
    parser.add_argument("--samples", type=bounded_int(0, 1000), default=0, metavar="N",
                        help="sampled replies per problem for pass@K (default 2K)")
    add_option(parser, "temperature", TEMPERATURE, 0.8, note="of pass@K's samples, > 0")
    parser.add_argument("--bpb-batches", type=count, default=20, help="dev batches for bpb (default %(default)s)")
    parser.add_argument("--no-record", dest="record", action="store_false",
                        help="do not append the scores to the run's evals.jsonl and report card")
    add_option(parser, "json", JSON, False)


def format_scores(scores: dict[str, dict[str, float]]) -> str:
    width = max(len(task) for task in scores)
    return "\n".join(f"{task:<{width}}  " + "  ".join(f"{name} {value:.4f}" for name, value in metrics.items())
                     for task, metrics in scores.items())


def run(args: argparse.Namespace) -> int:

    tasks = parse_tasks(args.tasks)  # every spec and file checked before the model loads
    options = EvalOptions(examples=args.examples, seed=args.seed, batch_size=args.batch_size,
                          max_new_tokens=args.max_new_tokens, pass_k=args.pass_k, samples=args.samples,
                          temperature=args.temperature, bpb_batches=args.bpb_batches)
    evaluation = evaluate_checkpoint(args.checkpoint, tasks, options)
    for note in evaluation.notes:
        print(note, file=sys.stderr)
    report = None
    if args.record:
        report = write_report_card(record(evaluation))
    if args.json:
        print(json.dumps(evaluation.to_dict()))
        return 0
    print(f"{evaluation.checkpoint} (step {evaluation.step}, {evaluation.stage}), {evaluation.wall_s:.1f} s")
    print(format_scores(evaluation.scores()))
    if report is not None:
        print(f"report card: {report}")
    return 0
