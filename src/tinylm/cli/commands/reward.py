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
from typing import Any

HELP = "train a reward model on preference pairs (Bradley-Terry, scalar head)"
SHOWN = (("dev_accuracy", "held-out preference accuracy", "{:.1%}"), ("dev_margin", "mean margin", "{:.3f}"))

_D: dict[str, Any] = {}


def _defaults() -> dict[str, Any]:
    if not _D:
        from tinylm.stages.preference.config import RewardConfig

        _D.update(RewardConfig(base="-").to_dict())
    return _D


def add_arguments(parser: argparse.ArgumentParser) -> None:
    from tinylm.cli.preference_options import add_pair_arguments

    d = _defaults()
    parser.add_argument("--margin", type=float, default=d["margin"],
                        help="Bradley-Terry margin: -log sigmoid(r_w - r_l - margin) (default %(default)s)")
    add_pair_arguments(parser, d, "reward")


def run(args: argparse.Namespace) -> int:
    from tinylm.cli.preference_options import print_summary
    from tinylm.cli.run_stage import run_stage
    from tinylm.stages.preference.config import RewardConfig
    from tinylm.stages.preference.reward import RewardStage

    fields = set(_defaults())
    config = RewardConfig(**{k: v for k, v in vars(args).items() if k in fields})
    return run_stage(args, config, RewardStage(), _defaults(),
                     lambda summary: print_summary(summary, SHOWN))
