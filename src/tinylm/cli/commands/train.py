"""Pretrain a language model from scratch.

With no arguments this is the demo: it prepares the default corpus if needed (the Python standard
library's source, BPE 4096), trains the `tiny` modern preset for a few minutes on a CPU, saves a
checkpoint in runs/tiny-modern and prints a sample.

examples:
  tinylm train                                      the demo
  tinylm train --arch classic                       the GPT-2-style baseline, same budget
  tinylm train --set n_kv_head=1 --optimizer adamw  any model field, another optimizer
  tinylm train --data DIR --preset small --out runs/small --max-steps 5000 --checkpoint-every 500
  tinylm train --out runs/small --resume latest --max-steps 10000   continue (steps are totals)
  tinylm train --time-budget 600 --schedule wsd     stop after ten minutes, saved and resumable

several GPUs or CPU processes (DDP; gloo on CPU, NCCL on CUDA):
  torchrun --nproc_per_node=8 -m tinylm train --preset 124m --data DIR
several nodes (run on every node, I = 0..M-1, HOST = node 0):
  torchrun --nnodes=M --node_rank=I --nproc_per_node=8 --rdzv_backend=c10d \\
           --rdzv_endpoint=HOST:29500 -m tinylm train --preset 1b --data DIR --fsdp
"""

from __future__ import annotations

import argparse
import os
import sys

from tinylm.cli.run_stage import add_stage_arguments, run_stage_command
from tinylm.cli.run_summary import steps_and_loss
from tinylm.stages import STAGES
from tinylm.train.loop import TrainSummary
from tinylm.train.progress import format_si

STAGE = STAGES["pretrain"]
HELP = STAGE.help


def add_arguments(parser: argparse.ArgumentParser) -> None:
    add_stage_arguments(parser, STAGE)


def _print_summary(summary: TrainSummary) -> None:
    parts = steps_and_loss(summary)
    if summary.dev_loss is not None:
        parts.append(f"dev loss {summary.dev_loss:.4f} ({summary.dev_bpb:.3f} bits/byte)")
    parts.append(f"{format_si(summary.tokens_per_s)} tokens/s")
    print("done: " + ", ".join(parts))
    if summary.checkpoint:
        print(f"checkpoint: {summary.checkpoint}")
        print(f"loss plot: {os.path.join(summary.run_dir, 'loss.png')}")
    if summary.sample is not None:
        print("sample:\n" + summary.sample)
    sys.stdout.flush()


def run(args: argparse.Namespace) -> int:
    return run_stage_command(args, STAGE, _print_summary)
