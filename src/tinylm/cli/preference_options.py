"""Options and the closing summary shared by `tinylm dpo` and `tinylm reward`: base, pairs, LoRA, engine."""

from __future__ import annotations

import argparse
import os
from typing import Any


def add_pair_arguments(parser: argparse.ArgumentParser, d: dict[str, Any], stage: str) -> None:
    """--base, --data and the held-out options; then LoRA and the engine's options."""
    from tinylm.cli.commands.sft import add_lora_arguments
    from tinylm.cli.commands.train import add_engine_arguments

    g = parser.add_argument_group("base and pairs")
    g.add_argument("--base", required=True, metavar="RUN", help="checkpoint or run folder to tune (usually SFT)")
    g.add_argument("--data", default=d["data"], metavar="SPEC",
                   help="builtin:arith, builtin:docstring, FILE.jsonl of pairs or hf:NAME (default %(default)s)")
    g.add_argument("--eval-data", default=None, metavar="SPEC",
                   help="held-out pairs (default: the task's test split, or a share of --data)")
    g.add_argument("--dev-fraction", type=float, default=d["dev_fraction"],
                   help="share of a file's pairs held out (default %(default)s)")
    g.add_argument("--train-examples", type=int, default=d["train_examples"],
                   help="problems turned into pairs for a built-in task (default %(default)s)")
    g.add_argument("--eval-examples", type=int, default=d["eval_examples"],
                   help="held-out problems for a built-in task (default %(default)s)")
    g.add_argument("--max-new-tokens", type=int, default=d["max_new_tokens"],
                   help="reply length limit when scoring exact-match (default %(default)s)")
    g.add_argument("--on-error", default=d["on_error"], choices=("stop", "skip"),
                   help="a malformed row: stop with FILE:LINE, or skip and count it (default %(default)s)")
    g.add_argument("--out", default=None, metavar="DIR", help=f"run folder (default runs/<base run>-{stage})")
    g.add_argument("--seed", type=int, default=d["seed"])
    add_lora_arguments(parser, d)
    add_engine_arguments(parser, d)


def print_summary(summary: Any, shown: tuple[tuple[str, str, str], ...]) -> None:
    from tinylm.cli.run_summary import before_after, print_outcome

    parts = [f"step {summary.steps}"]
    if summary.final_loss is not None:
        parts.append(f"train loss {summary.final_loss:.4f}")
    print_outcome(summary, parts + before_after(summary, shown),
                  [f"loss plot: {os.path.join(summary.run_dir, 'loss.png')}"])
