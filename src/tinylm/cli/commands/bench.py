"""Measure training and decoding speed next to Hugging Face `transformers`, in one process.

Prints a table, or with --json one JSON object with every sample. The matmul peak is the MFU
denominator on a CPU; on a GPU MFU is against the datasheet peak and the measured one is shown too.
Ratios (tinylm / reference) are the headline: both sides are measured in alternation in this run,
with the same batch, threads and dtype, so machine noise slows both alike.

examples:
  tinylm bench --preset tiny --threads 2
  tinylm bench --preset 13m --arch classic --batch-size 16 --only train
  tinylm bench --preset 124m --device cuda --dtype bf16 --compile --json
  tinylm bench --preset small --batch-size 8 --only train --dtype auto --out bench.json
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

from tinylm.bench.suite import SECTIONS, BenchOptions, format_table, run_bench
from tinylm.cli.options import add_config_option, add_option
from tinylm.config import parse_override
from tinylm.errors import TinyLMError
from tinylm.options import BATCH_SIZE, DEVICE, DTYPE, INT8, JSON, THREADS
from tinylm.train.config import TrainConfig

HELP = "throughput and MFU, side by side with transformers"


def add_arguments(parser: argparse.ArgumentParser) -> None:
    for name in ("preset", "arch", "overrides"):
        add_config_option(parser, TrainConfig, name)
    add_option(parser, "batch_size", BATCH_SIZE, 16)
    add_config_option(parser, TrainConfig, "seq_len")
    parser.add_argument("--repeats", type=int, default=5, help="timed repeats per measurement (median is reported)")
    parser.add_argument("--warmup", type=int, default=2, help="untimed training steps first")
    add_option(parser, "device", DEVICE, "auto")
    add_option(parser, "dtype", DTYPE, "fp32", note="fp32 keeps the figures comparable across machines; auto is "
                                                     "what `tinylm train` would pick")
    add_option(parser, "threads", THREADS, kind="int", note="for both sides")
    parser.add_argument("--compile", action="store_true",
                        help="torch.compile both models (tinylm per block, transformers whole, as its users do)")
    add_config_option(parser, TrainConfig, "attention")
    parser.add_argument("--no-reference", dest="reference", action="store_false",
                        help="skip the transformers measurements")
    parser.add_argument("--decode-tokens", type=int, default=128, help="new tokens per decode measurement")
    add_option(parser, "int8", INT8, False, note="decoding, as `tinylm generate --int8` (transformers keeps float)")
    parser.add_argument("--only", default=None, metavar="SECTIONS",
                        help="comma list of matmul,decode,train,loader,tokenizer (default: all)")
    parser.add_argument("--profile", action="store_true", help="also print where a training step's time goes")
    add_option(parser, "json", JSON, False, note="instead of the table")
    parser.add_argument("--out", default=None, metavar="FILE", help="also write the JSON here")


def run(args: argparse.Namespace) -> int:

    overrides = dict(parse_override(text) for text in args.overrides)
    sections = tuple(s.strip() for s in args.only.split(",") if s.strip()) if args.only else SECTIONS
    options = BenchOptions(
        preset=args.preset, arch=args.arch, overrides=overrides, batch_size=args.batch_size, seq_len=args.seq_len,
        repeats=args.repeats, warmup=args.warmup, device=args.device, dtype=args.dtype, threads=args.threads,
        compile=args.compile, attention=args.attention, reference=args.reference, decode_tokens=args.decode_tokens,
        int8=args.int8, sections=sections, profile=args.profile)
    result = run_bench(options, say=lambda line: print(line, file=sys.stderr))
    text = json.dumps(result, indent=2)
    print(text if args.json else format_table(result))
    if args.out:
        write_result(Path(args.out), text)
    return 0


def write_result(path: Path, text: str) -> None:
    """The --out copy of the JSON; a folder that is missing, read-only or full is one line, not a traceback."""
    try:
        path.write_text(text + "\n", encoding="utf-8")
    except OSError as exc:
        raise TinyLMError(f"cannot write --out {path}: {exc.strerror or exc} (the results are printed above)") from None
