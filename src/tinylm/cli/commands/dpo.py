"""Preference tuning: learn from pairs of answers with a loss of the DPO family, no reward model.

--base is the checkpoint to tune (usually `tinylm sft`'s). --data names the pairs: a built-in task
(the verified answer over a plausible wrong one, generated from the seed), a JSONL file (prompt /
chosen / rejected as text or messages, UltraFeedback or HH-RLHF layouts, prompt / completion / label
rows for KTO) or hf:NAME. --loss picks the objective; its hyper-parameters default to the published
values. The reference is the base: its log-probs are cached before the first step, or with LoRA the
base with the adapters off (--reference copy keeps a frozen second model, the usual way).

the losses are listed under --loss below (docs/posttrain/preference.md derives each one)

examples:
  tinylm dpo --base runs/tiny-modern-sft --data builtin:arith                   DPO on verified pairs
  tinylm dpo --base runs/tiny-modern-sft --loss simpo                           reference-free, length-normalised
  tinylm dpo --base runs/tiny-modern-sft --loss ipo --beta 0.5 --lora-rank 8    IPO with LoRA adapters
  tinylm dpo --base runs/tiny-modern-sft --data pairs.jsonl --ref runs/other    another reference model
"""

from __future__ import annotations

import argparse
import dataclasses

from tinylm.cli.run_stage import add_stage_arguments, print_scores, run_stage_command
from tinylm.stages import STAGES

STAGE = STAGES["dpo"]
HELP = STAGE.help
# KTO's own held-out score, shown where the run logged it (an unpaired run has no pair scores to show)
SHOWN = dataclasses.replace(STAGE, scores=(*STAGE.scores, ("dev_label_accuracy",
                                                           "held-out answers on their label's side", "{:.1%}")))


def add_arguments(parser: argparse.ArgumentParser) -> None:
    add_stage_arguments(parser, STAGE)


def run(args: argparse.Namespace) -> int:
    return run_stage_command(args, STAGE, report=lambda summary: print_scores(SHOWN, summary))
