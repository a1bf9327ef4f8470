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
from typing import Any

HELP = "RL from verifiable rewards: --algo grpo|dr_grpo|dapo|gspo|rloo|reinforce_pp|ppo"

_D: dict[str, Any] = {}


def _defaults() -> dict[str, Any]:
    if not _D:
        from tinylm.stages.rl.config import RLConfig

        _D.update(RLConfig(base="-").to_dict())
    return _D


def add_arguments(parser: argparse.ArgumentParser) -> None:
    from tinylm.cli.commands.sft import add_lora_arguments
    from tinylm.cli.commands.train import add_engine_arguments
    from tinylm.stages.rl.algorithms import algorithms
    from tinylm.stages.rl.kl import KL_ESTIMATORS
    from tinylm.stages.rl.policy_losses import AGGREGATIONS

    d = _defaults()
    g = parser.add_argument_group("base, task and reward")
    g.add_argument("--base", required=True, metavar="RUN", help="chat checkpoint or run folder (from tinylm sft)")
    g.add_argument("--task", default=d["task"], metavar="SPEC",
                   help="builtin:arith?digits=2&ops=+ ... (default %(default)s)")
    g.add_argument("--reward", default=d["reward"], metavar="SPEC",
                   help="exact, exact+format, python (sandboxed), model:PATH or module:function (default %(default)s)")
    g.add_argument("--reference", default=None, metavar="RUN", help="frozen KL reference (default: --base)")
    g.add_argument("--train-examples", type=int, default=d["train_examples"], help="train prompts drawn from")
    g.add_argument("--eval-examples", type=int, default=d["eval_examples"], help="held-out problems for exact-match")
    g.add_argument("--out", default=None, metavar="DIR", help="run folder (default runs/<base run>-rl-<algo>)")
    g.add_argument("--seed", type=int, default=d["seed"])

    a = parser.add_argument_group("algorithm")
    a.add_argument("--algo", default=d["algo"], choices=tuple(algorithms()))
    a.add_argument("--epochs", type=int, default=d["epochs"], help="optimizer steps per batch of rollouts")
    a.add_argument("--aggregation", default=None, choices=AGGREGATIONS, help="loss aggregation (default: the algo's)")
    a.add_argument("--beta", type=float, default=None, help="KL coefficient (default: the algo's)")
    a.add_argument("--kl-estimator", default=d["kl_estimator"], choices=KL_ESTIMATORS)
    a.add_argument("--clip-low", type=float, default=None, help="epsilon: ratio clipped below 1 - eps")
    a.add_argument("--clip-high", type=float, default=None, help="ratio clipped above 1 + eps (DAPO: 0.28)")
    a.add_argument("--oversample", type=int, default=d["oversample"], help="dapo: prompts tried per slot")
    a.add_argument("--overlong-buffer", type=int, default=None, help="dapo: soft length-penalty zone in tokens")
    a.add_argument("--gamma", type=float, default=d["gamma"], help="ppo: discount")
    a.add_argument("--lam", type=float, default=d["lam"], help="ppo: GAE lambda")
    a.add_argument("--vf-coef", type=float, default=d["vf_coef"], help="ppo: value loss weight")
    a.add_argument("--value-clip", type=float, default=d["value_clip"], help="ppo: value clip range")

    r = parser.add_argument_group("rollouts")
    r.add_argument("--group-size", type=int, default=d["group_size"], metavar="G", help="responses per prompt")
    r.add_argument("--max-new-tokens", type=int, default=d["max_new_tokens"], help="response length limit")
    r.add_argument("--temperature", type=float, default=d["temperature"])
    r.add_argument("--top-k", type=int, default=None)
    r.add_argument("--top-p", type=float, default=None)
    add_lora_arguments(parser, d)
    add_engine_arguments(parser, d)


def config_from_args(args: argparse.Namespace) -> Any:
    from tinylm.stages.rl.config import RLConfig

    fields = set(_defaults())
    return RLConfig(**{k: v for k, v in vars(args).items() if k in fields})


def _print_summary(summary: Any) -> None:
    from tinylm.cli.run_summary import before_after, print_outcome

    parts = [f"step {summary.steps}", *before_after(summary, (("exact_match", "held-out exact-match", "{:.1%}"),)),
             f"{summary.wall_s:.0f} s"]
    print_outcome(summary, parts, [f"curves: {os.path.join(summary.run_dir, 'rl.png')} (loss: loss.png)"])


def run(args: argparse.Namespace) -> int:
    from tinylm.cli.run_stage import run_stage
    from tinylm.stages.rl.stage import RLStage

    return run_stage(args, config_from_args(args), RLStage(), _defaults(),
                     _print_summary)
