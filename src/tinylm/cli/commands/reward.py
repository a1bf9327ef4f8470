"""Train a reward model on preference pairs: a scalar head on the last token, Bradley-Terry loss.

--base is the checkpoint to start from (usually `tinylm sft`'s); --data names the pairs as for
`tinylm dpo` (a built-in task's verified pairs, a JSONL file, hf:NAME). Logged: both sides' scores,
their margin and the share of pairs ranked right; held-out preference accuracy and mean margin every
--eval-every steps and before the first. The checkpoint exports to transformers as a
sequence-classification model (tinylm.interop.hf_reward_export).

examples:
  tinylm reward --base runs/tiny-modern-sft --data builtin:arith
  tinylm reward --base runs/tiny-modern-sft --data pairs.jsonl --margin 0.5
"""

from __future__ import annotations

import argparse

from tinylm.cli.run_stage import add_stage_arguments, run_stage_command
from tinylm.stages import STAGES

STAGE = STAGES["reward"]
HELP = STAGE.help


def add_arguments(parser: argparse.ArgumentParser) -> None:
    add_stage_arguments(parser, STAGE)


def run(args: argparse.Namespace) -> int:
    return run_stage_command(args, STAGE)
