"""Pretrain a language model from scratch.

With no arguments this is the demo: it prepares the default corpus if needed (the Python standard
library's source, BPE 4096), trains the `tiny` modern preset for a few minutes on a CPU, saves a
checkpoint in runs/tiny-modern and prints a sample.

examples:
  tinylm train                                      the demo
  tinylm train --arch classic                       the GPT-2-style baseline, same budget
  tinylm train --set n_kv_head=1 --optimizer muon   any model field, another optimizer
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
from typing import Any

HELP = "pretrain a model (no arguments: the demo on the embedded corpus)"
OPTIMIZERS = ("adamw", "muon")  # = tinylm.train.optim.OPTIMIZERS, which imports torch (too slow for --help)

_D: dict[str, Any] = {}  # TrainConfig defaults, read lazily to keep `tinylm --help` light


def _defaults() -> dict[str, Any]:
    if not _D:
        from tinylm.train.config import TrainConfig

        _D.update(TrainConfig().to_dict())
    return _D


def _as_items(value: Any) -> list[str]:
    """Model overrides as "name=value" strings, from a list (CLI, `set = [...]`) or a `[set]` table."""
    if value is None:
        return []
    if isinstance(value, dict):
        return [f"{name}={item}" for name, item in value.items()]
    return [value] if isinstance(value, str) else [str(item) for item in value]


class _SetAction(argparse.Action):
    """`--set` appends to whatever a config file gave, whether a list or a table."""

    def __call__(self, parser: argparse.ArgumentParser, namespace: argparse.Namespace, values: Any,
                 option_string: str | None = None) -> None:
        setattr(namespace, self.dest, [*_as_items(getattr(namespace, self.dest, None)), values])


def add_arguments(parser: argparse.ArgumentParser) -> None:
    from tinylm.presets import PRESETS

    d = _defaults()
    m = parser.add_argument_group("model and data")
    m.add_argument("--preset", default=d["preset"], choices=PRESETS, help="model size (default %(default)s)")
    m.add_argument("--arch", default=d["arch"], choices=("modern", "classic"), help="(default %(default)s)")
    m.add_argument("--set", dest="set", action=_SetAction, default=[], metavar="FIELD=VALUE",
                   help="override a model field, e.g. --set n_kv_head=1 (repeatable; in a config file: "
                        "set = [\"n_kv_head=1\"] or a [set] table)")
    m.add_argument("--data", default=None, metavar="DIR",
                   help="prepared data folder (default: the pystdlib corpus, prepared on first use)")
    m.add_argument("--out", default=None, metavar="DIR", help="run folder (default runs/<preset>-<arch>)")
    m.add_argument("--seed", type=int, default=d["seed"])
    add_engine_arguments(parser, d)
    s = parser.add_argument_group("sample at the end")
    s.add_argument("--sample-tokens", type=int, default=d["sample_tokens"], help="0 = no sample")
    s.add_argument("--prompt", default=d["prompt"], help="text to continue (default: a new document)")
    s.add_argument("--temperature", type=float, default=d["temperature"])
    s.add_argument("--top-k", type=int, default=d["top_k"])


def add_engine_arguments(parser: argparse.ArgumentParser, d: dict[str, Any]) -> None:
    """The options of the one training engine, shared by every training stage (`d`: that stage's defaults)."""
    from tinylm.runtime.device import DTYPES
    from tinylm.train.schedule import SCHEDULES

    h = parser.add_argument_group("hardware")
    h.add_argument("--device", default=d["device"], help="auto (cuda > mps > cpu), cpu, cuda, cuda:N, mps")
    h.add_argument("--dtype", default=d["dtype"], choices=DTYPES,
                   help="autocast dtype; auto = bf16 on bf16 GPUs and on CPUs with native bf16 where a short "
                        "calibration shows it faster (the reason is printed); fp32 elsewhere")
    h.add_argument("--threads", type=int, default=None, help="CPU threads (default: torch's choice)")
    h.add_argument("--compile", nargs="?", const="on", default=d["compile"], choices=("auto", "on", "off"),
                   help="torch.compile each block; auto = only when the measured compile time pays back "
                        "(bare --compile = on)")
    h.add_argument("--attention", default=d["attention"], choices=("auto", "sdpa", "blockwise"),
                   help="causal attention kernel; auto = blockwise query products on a CPU where the model's "
                        "attention layer measures faster with them than with SDPA (the reason is printed)")
    h.add_argument("--gradient-checkpointing", action="store_true", help="recompute activations in backward")
    h.add_argument("--fsdp", action="store_true", help="shard the model with FSDP2 (under torchrun)")

    b = parser.add_argument_group("batch and budget")
    b.add_argument("--batch-size", type=int, default=d["batch_size"], help="rows per micro-batch per process")
    b.add_argument("--grad-accum", type=int, default=d["grad_accum"], help="micro-batches per optimizer step")
    b.add_argument("--seq-len", type=int, default=None, help="tokens per row (default: the context length)")
    b.add_argument("--max-steps", type=int, default=d["max_steps"],
                   help="total optimizer steps, counted across resumes (default %(default)s)")
    b.add_argument("--max-tokens", type=int, default=None, help="stop after this many training tokens")
    b.add_argument("--time-budget", type=float, default=None, metavar="SECONDS",
                   help="stop (and save) before this many seconds of training")

    o = parser.add_argument_group("optimizer and schedule")
    o.add_argument("--optimizer", default=d["optimizer"], choices=OPTIMIZERS)
    o.add_argument("--lr", type=float, default=d["lr"], help="AdamW learning rate (default %(default)s)")
    o.add_argument("--weight-decay", type=float, default=d["weight_decay"])
    o.add_argument("--beta1", type=float, default=d["beta1"])
    o.add_argument("--beta2", type=float, default=d["beta2"])
    o.add_argument("--muon-lr", type=float, default=d["muon_lr"])
    o.add_argument("--muon-momentum", type=float, default=d["muon_momentum"])
    o.add_argument("--grad-clip", type=float, default=d["grad_clip"], help="max gradient norm; 0 = off")
    o.add_argument("--schedule", default=d["schedule"], choices=SCHEDULES)
    o.add_argument("--schedule-steps", type=int, default=None,
                   help="length of the lr schedule (default: --max-steps)")
    o.add_argument("--warmup-steps", type=int, default=d["warmup_steps"])
    o.add_argument("--min-lr-ratio", type=float, default=d["min_lr_ratio"])
    o.add_argument("--decay-fraction", type=float, default=d["decay_fraction"], help="wsd: final decay share")

    r = parser.add_argument_group("evaluation, logging, checkpoints")
    r.add_argument("--eval-every", type=int, default=d["eval_every"], help="0 = only at the end")
    r.add_argument("--eval-batches", type=int, default=d["eval_batches"])
    r.add_argument("--log-every", type=int, default=d["log_every"])
    r.add_argument("--checkpoint-every", type=int, default=d["checkpoint_every"], help="0 = only at the end")
    r.add_argument("--keep-last", type=int, default=d["keep_last"], help="checkpoints to keep; 0 = all")
    r.add_argument("--resume", default=None, metavar="latest|PATH", help="continue from a checkpoint")
    r.add_argument("--no-progress", dest="progress", action="store_false", help="no progress bar")
    r.add_argument("--tensorboard", action="store_true", help="also log to TensorBoard (if installed)")
    r.add_argument("--wandb", action="store_true", help="also log to Weights & Biases (if installed)")


def config_from_args(args: argparse.Namespace) -> Any:
    """The TrainConfig the parsed options describe (`--set` strings become typed model overrides)."""
    from tinylm.config import parse_override
    from tinylm.train.config import TrainConfig

    fields = set(_defaults()) - {"overrides"}
    values = {k: v for k, v in vars(args).items() if k in fields}
    overrides = dict(parse_override(item) for item in _as_items(getattr(args, "set", None)))
    return TrainConfig(overrides=overrides, **values)


def _print_summary(summary: Any) -> None:
    from tinylm.train.progress import format_si

    parts = [f"step {summary.steps}"]
    if summary.final_loss is not None:
        parts.append(f"train loss {summary.final_loss:.4f}")
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


def explicit_options(args: argparse.Namespace, defaults: dict[str, Any] | None = None) -> set[str]:
    """Options the user gave (command line or --config file); the CLI records them as `_explicit`."""
    given = getattr(args, "_explicit", None)
    if given is None:  # a caller that built the namespace itself: what differs from the defaults
        defaults = {**(defaults or _defaults()), "set": []}
        given = {k for k, v in vars(args).items() if k in defaults and v != defaults[k]}
    return {"overrides" if name == "set" else name for name in given}


def resumed_config(config: Any, explicit: set[str], run_name: tuple[str, str] | None = None) -> Any:
    """A `--resume` run takes its model, data and options from the run it continues, except what was given.

    `run_name` is the stage's default run folder name (runs/<name>-<kind>); pretraining's is <preset>-<arch>.
    """
    from tinylm.train.resume_options import describe_taken, options_for_resume
    from tinylm.train.run_dir import choose_run_dir, find_resume_checkpoint

    run_dir = choose_run_dir(config.out, *(run_name or (config.preset, config.arch)), config.resume)
    checkpoint = find_resume_checkpoint(config.resume, run_dir)
    if checkpoint is None:
        return config
    merged, taken = options_for_resume(config.to_dict(), explicit, checkpoint)
    if config.resume == "latest":
        merged["out"] = str(run_dir)
    if taken and int(os.environ.get("RANK", "0")) == 0:
        print(describe_taken(merged, taken), file=sys.stderr)
    return type(config)(**merged)


def run(args: argparse.Namespace) -> int:
    from tinylm.cli.run_stage import run_stage
    from tinylm.stages.pretrain.stage import PretrainStage

    return run_stage(args, config_from_args(args), PretrainStage(), _defaults(), _print_summary)
