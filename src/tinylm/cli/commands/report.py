"""Parameters, FLOPs per token and a training-memory estimate for a preset or a checkpoint.

The model is built on PyTorch's `meta` device (shapes without storage), so even the 3b preset
costs no memory to report.

  tinylm report --preset 13m --arch classic
  tinylm report --preset tiny --set n_experts=8 --set n_experts_per_token=2 --json
  tinylm report --checkpoint runs/demo
  tinylm report --run runs/demo        (re)build the run's report card: report.md and report.html
"""

from __future__ import annotations

import argparse
import json

from tinylm.checkpoint import checkpoint_model_config, resolve_checkpoint
from tinylm.cli.options import add_config_option, add_option
from tinylm.config import parse_override
from tinylm.evaluate.report_card import REPORT_MD, write_report_card
from tinylm.models.factory import build_model
from tinylm.models.memory import training_memory
from tinylm.options import BATCH_SIZE, JSON
from tinylm.presets import preset_config
from tinylm.stages import report_curves
from tinylm.stages.pretrain.config import PretrainConfig

HELP = "parameters, FLOPs per token and memory estimate for a preset or checkpoint"


def add_arguments(parser: argparse.ArgumentParser) -> None:
    for name in ("preset", "arch", "overrides"):
        add_config_option(parser, PretrainConfig, name)
    parser.add_argument("--checkpoint", help="report the model of a checkpoint (or run folder) instead")
    parser.add_argument("--run", metavar="RUN", help="(re)build RUN/report.md and RUN/report.html, the run's report "
                        "card (model, lineage, data, throughput, curves, eval scores)")
    add_option(parser, "batch_size", BATCH_SIZE, 8, note="for the activation estimate")
    add_config_option(parser, PretrainConfig, "seq_len")
    parser.add_argument("--activation-dtype", default="float32", choices=["float32", "bfloat16"])
    add_option(parser, "json", JSON, False)


def _config_from_checkpoint(path: str):
    """The model config of a checkpoint or of a run folder's newest one (no weights are read)."""
    return checkpoint_model_config(resolve_checkpoint(path))


def build_report(config, batch_size: int = 8, seq_len: int | None = None, activation_bytes: int = 4) -> dict:
    import torch


    seq_len = seq_len or config.context_length
    with torch.device("meta"):
        model = build_model(config)
    params = model.num_params()
    memory = training_memory(config, params, batch_size, seq_len, activation_bytes)
    report = {
        "arch": config.arch,
        "params": params,
        "non_embedding_params": model.num_params(non_embedding=True),
        "active_params": model.num_params(active=True),
        "flops_per_token": model.flops_per_token(seq_len),
        "seq_len": seq_len,
        "batch_size": batch_size,
        "memory_bytes": memory.to_dict(),
        "config": config.to_dict(),
    }
    if config.arch == "modern":
        with torch.device("meta"):
            report["kv_cache_bytes_per_token"] = model.new_cache(1, max_len=1, device="meta").bytes_per_token()
    return report


def _human(n: float, unit: str = "") -> str:
    for suffix in ("", "K", "M", "G", "T"):
        if abs(n) < 1000:
            return f"{n:.3g} {suffix}{unit}".strip()
        n /= 1000
    return f"{n:.3g} P{unit}"


def run(args: argparse.Namespace) -> int:
    if args.run:
        page = write_report_card(args.run, report_curves)
        print(f"report card: {page} and {page.with_name(REPORT_MD)}")
        return 0

    overrides = dict(parse_override(item) for item in args.overrides)
    if args.checkpoint:
        config = _config_from_checkpoint(args.checkpoint).replace(**overrides)
    else:
        config = preset_config(args.preset, args.arch, **overrides)
    report = build_report(config, args.batch_size, args.seq_len, 2 if args.activation_dtype == "bfloat16" else 4)
    if args.json:
        print(json.dumps(report))
        return 0
    mem = report["memory_bytes"]
    name = args.checkpoint or f"{args.preset} ({config.arch})"
    lines = [
        f"model                {name}",
        f"parameters           {report['params']:,}",
        f"  non-embedding      {report['non_embedding_params']:,}",
        f"  active per token   {report['active_params']:,}",
        f"FLOPs per token      {_human(report['flops_per_token'], 'FLOP')} (training, seq_len {report['seq_len']})",
    ]
    if "kv_cache_bytes_per_token" in report:
        lines.append(f"KV cache per token   {_human(report['kv_cache_bytes_per_token'], 'B')}")
    lines += [
        f"training memory      batch {args.batch_size} x {report['seq_len']} tokens, AdamW, fp32 weights",
        f"  weights            {_human(mem['weights'], 'B')}",
        f"  gradients          {_human(mem['gradients'], 'B')}",
        f"  optimizer state    {_human(mem['optimizer'], 'B')}",
        f"  activations        {_human(mem['activations'], 'B')} ({args.activation_dtype})",
        f"  total (estimate)   {_human(mem['total'], 'B')}",
    ]
    print("\n".join(lines))
    return 0
