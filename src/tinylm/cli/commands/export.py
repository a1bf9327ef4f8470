"""Write a checkpoint as a Hugging Face `transformers` folder (config, safetensors, tokenizer).

The architecture is chosen by what the model computes, and only where the match is exact:
Llama (MHA/GQA/MQA), Mistral (+ sliding window), Qwen3 (QK-norm), Qwen2-MoE / Qwen3-MoE / Mixtral
(mixture of experts), DeepSeek-V3 (MLA), GPT-2 (classic). Anything else is refused, naming the feature.

  tinylm export --checkpoint runs/tiny-modern --out hf/tiny
  tinylm export --checkpoint runs/tiny-modern-sft --out hf/chat     with its chat template
  tinylm export --checkpoint runs/lora-sft --out hf/lora            the base + hf/lora/adapter (PEFT)
  tinylm export --checkpoint runs/tiny-reward --out hf/rm           a reward model: *ForSequenceClassification
  python -c "from transformers import AutoModelForCausalLM; AutoModelForCausalLM.from_pretrained('hf/tiny')"
"""

from __future__ import annotations

import argparse
import sys

from tinylm.checkpoint import read_checkpoint_config, resolve_checkpoint
from tinylm.cli.options import add_option
from tinylm.interop.hf_export import export_checkpoint
from tinylm.interop.hf_reward_export import export_reward_checkpoint
from tinylm.options import CHECKPOINT, DTYPE

STORED_DTYPE = {"fp32": "float32", "bf16": "bfloat16", "fp16": "float16"}  # auto: as trained
HELP = "write a checkpoint in Hugging Face transformers format"


def add_arguments(parser: argparse.ArgumentParser) -> None:
    add_option(parser, "checkpoint", CHECKPOINT)
    parser.add_argument("--out", required=True, help="folder to create (must not exist, or be empty)")
    add_option(parser, "dtype", DTYPE, "auto", note="here the dtype the weights are stored in; auto = as trained")
    parser.add_argument("--merge", action="store_true",
                        help="a LoRA run: fold the adapters into the weights (default: the base + OUT/adapter "
                             "in PEFT's format)")


def run(args: argparse.Namespace) -> int:

    if read_checkpoint_config(resolve_checkpoint(args.checkpoint)).get("reward_head") == "score":
        out, architecture = export_reward_checkpoint(args.checkpoint, args.out)  # a sequence-classification model
    else:
        out, architecture = export_checkpoint(args.checkpoint, args.out, STORED_DTYPE.get(args.dtype),
                                              merge=args.merge)
    print(f"exported {args.checkpoint} as {architecture} to {out}", file=sys.stderr)
    print(out)
    return 0
