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
from typing import Any

HELP = "supervised fine-tuning on conversations (built-in tasks, JSONL, hf:), optionally with LoRA"

_D: dict[str, Any] = {}


def _defaults() -> dict[str, Any]:
    if not _D:
        from tinylm.stages.sft.config import SFTConfig

        _D.update(SFTConfig(base="-").to_dict())
    return _D


def add_lora_arguments(parser: argparse.ArgumentParser, d: dict[str, Any]) -> None:
    """LoRA options, shared by every post-training command."""
    g = parser.add_argument_group("LoRA (base frozen, only low-rank adapters train)")
    g.add_argument("--lora-rank", type=int, default=d["lora_rank"], metavar="R", help="0 = full fine-tuning")
    g.add_argument("--lora-alpha", type=float, default=d["lora_alpha"], metavar="A",
                   help="scale alpha / R (default: alpha = R)")
    g.add_argument("--lora-dropout", type=float, default=d["lora_dropout"], metavar="P",
                   help="dropout on the adapter's input, training only")
    g.add_argument("--lora-targets", default=d["lora_targets"], metavar="LIST",
                   help="q,k,v,o,gate,up,down (any subset) or all-linear (default %(default)s)")
    g.add_argument("--rslora", action="store_true", help="scale alpha / sqrt(R) (rank-stabilised LoRA)")


def add_arguments(parser: argparse.ArgumentParser) -> None:
    from tinylm.cli.commands.train import add_engine_arguments

    d = _defaults()
    g = parser.add_argument_group("base and data")
    g.add_argument("--base", required=True, metavar="RUN", help="checkpoint or run folder to fine-tune")
    g.add_argument("--data", default=d["data"], metavar="SPEC",
                   help="builtin:arith, builtin:docstring, FILE.jsonl or hf:NAME (default %(default)s)")
    g.add_argument("--eval-data", default=None, metavar="SPEC",
                   help="held-out conversations (default: the task's test split, or a share of --data)")
    g.add_argument("--dev-fraction", type=float, default=d["dev_fraction"],
                   help="share of a file's conversations held out (default %(default)s)")
    g.add_argument("--train-examples", type=int, default=d["train_examples"],
                   help="conversations generated for a built-in task (default %(default)s)")
    g.add_argument("--eval-examples", type=int, default=d["eval_examples"],
                   help="held-out problems scored by exact-match (default %(default)s)")
    g.add_argument("--max-new-tokens", type=int, default=d["max_new_tokens"],
                   help="reply length limit when scoring exact-match (default %(default)s)")
    g.add_argument("--no-packing", dest="packing", action="store_false",
                   help="one conversation per row instead of packing several")
    g.add_argument("--on-error", default=d["on_error"], choices=("stop", "skip"),
                   help="a malformed data row: stop with FILE:LINE, or skip and count it (default %(default)s)")
    g.add_argument("--out", default=None, metavar="DIR", help="run folder (default runs/<base run>-sft)")
    g.add_argument("--seed", type=int, default=d["seed"])
    add_lora_arguments(parser, d)
    add_engine_arguments(parser, d)


def config_from_args(args: argparse.Namespace) -> Any:
    from tinylm.stages.sft.config import SFTConfig

    fields = set(_defaults())
    return SFTConfig(**{k: v for k, v in vars(args).items() if k in fields})


def _print_summary(summary: Any) -> None:
    from tinylm.cli.run_summary import before_after, print_outcome
    from tinylm.train.progress import format_si

    parts = [f"step {summary.steps}"]
    if summary.final_loss is not None:
        parts.append(f"train loss {summary.final_loss:.4f}")
    parts += before_after(summary, (("dev_loss", "dev loss (assistant tokens)", "{:.4f}"),
                                    ("exact_match", "held-out exact-match", "{:.1%}")))
    parts.append(f"{format_si(summary.tokens_per_s)} tokens/s")
    print_outcome(summary, parts, [f"loss plot: {os.path.join(summary.run_dir, 'loss.png')}",
                                   f"next: tinylm chat --checkpoint {summary.run_dir}"])


def run(args: argparse.Namespace) -> int:
    from tinylm.cli.run_stage import run_stage
    from tinylm.stages.sft.stage import SFTStage

    return run_stage(args, config_from_args(args), SFTStage(), _defaults(),
                     _print_summary)
