"""Supervised fine-tuning: teach a base model to answer in turns (chat format, loss on the assistant's words).

--base is any tinylm checkpoint or run folder (either architecture, imported ones too). --data is a
built-in offline task (generated from the seed, with a held-out split), a JSONL file of conversations
in OpenAI `messages`, Alpaca or ShareGPT form, or hf:NAME through `datasets` (needs a network).
Progress shows the training loss; every --eval-every steps (and before the first) the held-out
dev loss on assistant tokens and, for built-in tasks, exact-match are logged and printed.

examples:
  tinylm sft --base runs/tiny-modern --data builtin:arith                  the demo model learns sums
  tinylm sft --base runs/tiny-modern --data builtin:arith?digits=3&ops=+-  harder problems
  tinylm sft --base runs/tiny-modern --data chats.jsonl --lora-rank 8      LoRA: only adapters train
  tinylm sft --base runs/tiny-modern --data builtin:docstring --max-steps 1000
  tinylm sft --out runs/tiny-modern-sft --resume latest --max-steps 600    continue (steps are totals)
  tinylm chat --checkpoint runs/tiny-modern-sft                            then talk to it
"""

from __future__ import annotations

import argparse
import os

from tinylm.cli.run_stage import add_stage_arguments, run_stage_command
from tinylm.cli.run_summary import before_after, print_outcome, steps_and_loss
from tinylm.stages import STAGES
from tinylm.train.loop import TrainSummary
from tinylm.train.progress import format_si

STAGE = STAGES["sft"]
HELP = STAGE.help


def add_arguments(parser: argparse.ArgumentParser) -> None:
    add_stage_arguments(parser, STAGE)


def _print_summary(summary: TrainSummary) -> None:
    parts = steps_and_loss(summary)
    parts += before_after(summary, STAGE.scores)
    parts.append(f"{format_si(summary.tokens_per_s)} tokens/s")
    print_outcome(summary, parts, [f"loss plot: {os.path.join(summary.run_dir, 'loss.png')}",
                                   f"next: tinylm chat --checkpoint {summary.run_dir}"])


def run(args: argparse.Namespace) -> int:
    return run_stage_command(args, STAGE, _print_summary)
