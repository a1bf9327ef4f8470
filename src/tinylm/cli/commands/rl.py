"""RL from verifiable rewards: sample answers, score them with a verifier, push the policy toward the better ones.

--base is a chat model (the output of `tinylm sft`). Each step samples --group-size answers to each of
--batch-size prompts of --task with the current weights, scores them (--reward), and takes one
optimizer step of --algo. Every --eval-every steps (and before the first) the held-out exact-match
(greedy) is logged; every step logs reward, accuracy, KL, clip fraction, entropy, response length,
informative-group fraction and rollout vs update time.

examples:
  tinylm rl --base runs/tiny-modern-sft --algo grpo --task builtin:arith --max-steps 100
  tinylm rl --base runs/tiny-modern-sft --algo dapo --group-size 16
  tinylm rl --base runs/tiny-modern-sft --algo ppo --epochs 2 --aggregation token-mean
  tinylm rl --base runs/tiny-modern-sft --algo rloo --reward mymodule:my_reward
  tinylm rl --out runs/tiny-modern-sft-rl-grpo --resume latest --max-steps 200     continue
"""

from __future__ import annotations

import argparse
import os

from tinylm.cli.run_stage import add_stage_arguments, run_stage_command
from tinylm.cli.run_summary import before_after, print_outcome
from tinylm.stages import STAGES
from tinylm.train.loop import TrainSummary

STAGE = STAGES["rl"]
HELP = STAGE.help


def add_arguments(parser: argparse.ArgumentParser) -> None:
    add_stage_arguments(parser, STAGE)


def _print_summary(summary: TrainSummary) -> None:
    parts = [f"step {summary.steps}", *before_after(summary, STAGE.scores), f"{summary.wall_s:.0f} s"]
    print_outcome(summary, parts, [f"curves: {os.path.join(summary.run_dir, 'rl.png')} (loss: loss.png)"])


def run(args: argparse.Namespace) -> int:
    return run_stage_command(args, STAGE, _print_summary)
