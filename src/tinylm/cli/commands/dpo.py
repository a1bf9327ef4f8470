"""Preference tuning: learn from pairs of answers with a loss of the DPO family, no reward model.

--base is the checkpoint to tune (usually `tinylm sft`'s). --data names the pairs: a built-in task
(the verified answer over a plausible wrong one, generated from the seed), a JSONL file (prompt /
chosen / rejected as text or messages, UltraFeedback or HH-RLHF layouts, prompt / completion / label
rows for KTO) or hf:NAME. --loss picks the objective; its hyper-parameters default to the published
values. The reference is the base: its log-probs are cached before the first step, or with LoRA the
base with the adapters off (--reference copy keeps a frozen second model, the usual way).

losses: dpo cdpo robust ipo hinge simpo cpo orpo kto apo_zero (see docs/posttrain/preference.md)

examples:
  tinylm dpo --base runs/tiny-modern-sft --data builtin:arith                   DPO on verified pairs
  tinylm dpo --base runs/tiny-modern-sft --loss simpo                           reference-free, length-normalised
  tinylm dpo --base runs/tiny-modern-sft --loss ipo --beta 0.5 --lora-rank 8    IPO with LoRA adapters
  tinylm dpo --base runs/tiny-modern-sft --data pairs.jsonl --ref runs/other    another reference model
"""

from __future__ import annotations

import argparse
from typing import Any

HELP = "preference tuning on pairs: --loss dpo|cdpo|robust|ipo|hinge|simpo|cpo|orpo|kto|apo_zero"
SHOWN = (("dev_accuracy", "held-out preference accuracy", "{:.1%}"), ("dev_margin", "mean margin", "{:.3f}"),
         ("dev_logp_accuracy", "chosen likelier", "{:.1%}"), ("exact_match", "held-out exact-match", "{:.1%}"))

_D: dict[str, Any] = {}


def _defaults() -> dict[str, Any]:
    if not _D:
        from tinylm.stages.preference.config import DPOConfig

        _D.update(DPOConfig(base="-").to_dict())
    return _D


def add_arguments(parser: argparse.ArgumentParser) -> None:
    from tinylm.cli.preference_options import add_pair_arguments

    d = _defaults()
    g = parser.add_argument_group("the loss and its reference")
    g.add_argument("--loss", default=d["loss"], metavar="NAME",
                   help="dpo, cdpo, robust, ipo, hinge, simpo, cpo, orpo, kto, apo_zero (default %(default)s)")
    g.add_argument("--beta", type=float, default=None, help="the loss's beta (default: its published value)")
    g.add_argument("--gamma", type=float, default=None, help="SimPO's target margin gamma (default 0.5)")
    g.add_argument("--lam", type=float, default=None, help="CPO's, RPO's NLL weight (1.0), ORPO's odds ratio's (0.1)")
    g.add_argument("--label-smoothing", type=float, default=None, help="cdpo / robust: label flip rate (0.1)")
    g.add_argument("--desirable-weight", type=float, default=None, help="KTO: weight of desirable answers (1.0)")
    g.add_argument("--undesirable-weight", type=float, default=None, help="KTO: weight of undesirable answers (1.0)")
    g.add_argument("--ref", default=None, metavar="RUN", help="reference checkpoint (default: the base)")
    g.add_argument("--reference", default=d["reference"], choices=("auto", "cached", "copy", "adapters"),
                   help="how pi_ref is computed: auto = cached, or adapters with LoRA (default %(default)s)")
    add_pair_arguments(parser, d, "dpo")


def run(args: argparse.Namespace) -> int:
    from tinylm.cli.preference_options import print_summary
    from tinylm.cli.run_stage import run_stage
    from tinylm.stages.preference.config import DPOConfig
    from tinylm.stages.preference.dpo import DPOStage

    fields = set(_defaults())
    config = DPOConfig(**{k: v for k, v in vars(args).items() if k in fields})
    return run_stage(args, config, DPOStage(), _defaults(),
                     lambda summary: print_summary(summary, SHOWN))
