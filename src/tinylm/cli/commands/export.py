"""Write a checkpoint as a Hugging Face `transformers` folder, or as one GGUF file for llama.cpp and Ollama.

The architecture is chosen by what the model computes, and only where the match is exact:
Llama (MHA/GQA/MQA), Mistral (+ sliding window), Qwen3 (QK-norm), Qwen2-MoE / Qwen3-MoE / Mixtral
(mixture of experts), DeepSeek-V3 (MLA), GPT-2 (classic). Anything else is refused, naming the feature.

  tinylm export --checkpoint runs/tiny-modern --out hf/tiny
  tinylm export --checkpoint runs/tiny-modern-sft --out hf/chat     with its chat template
  tinylm export --checkpoint runs/lora-sft --out hf/lora            the base + hf/lora/adapter (PEFT)
  tinylm export --checkpoint runs/tiny-reward --out hf/rm           a reward model: *ForSequenceClassification
  python -c "from transformers import AutoModelForCausalLM; AutoModelForCausalLM.from_pretrained('hf/tiny')"

With --format gguf, OUT holds model.gguf (llama, qwen3 or gpt2 layout; see interop/gguf_layout.py)
and an Ollama Modelfile; --quant picks the number type of its matrices:

  tinylm export --checkpoint runs/tiny-modern-sft --out gguf/chat --format gguf --quant q8_0
  ollama create tiny-chat -f gguf/chat/Modelfile
"""

from __future__ import annotations

import argparse
import sys

from tinylm.checkpoint import read_checkpoint_config, resolve_checkpoint
from tinylm.cli.options import add_option
from tinylm.errors import TinyLMError
from tinylm.interop.gguf_export import export_gguf
from tinylm.interop.gguf_tensors import QUANTS
from tinylm.interop.hf_export import export_checkpoint
from tinylm.interop.hf_reward_export import export_reward_checkpoint
from tinylm.options import CHECKPOINT, DTYPE

STORED_DTYPE = {"fp32": "float32", "bf16": "bfloat16", "fp16": "float16"}  # auto: as trained
HELP = "write a checkpoint in Hugging Face transformers format, or as GGUF for llama.cpp / Ollama"


def add_arguments(parser: argparse.ArgumentParser) -> None:
    add_option(parser, "checkpoint", CHECKPOINT)
    parser.add_argument("--out", required=True, help="folder to create (must not exist, or be empty)")
    add_option(parser, "dtype", DTYPE, "auto", note="here the dtype the weights are stored in; auto = as trained")
    parser.add_argument("--merge", action="store_true",
                        help="a LoRA run: fold the adapters into the weights (default: the base + OUT/adapter "
                             "in PEFT's format)")
    parser.add_argument("--format", choices=("hf", "gguf"), default="hf",
                        help="hf: a transformers folder (default); gguf: OUT/model.gguf + OUT/Modelfile for llama.cpp "
                             "and Ollama (a LoRA run is always merged)")
    parser.add_argument("--quant", choices=QUANTS, default="f32",
                        help="GGUF only: the number type of the weight matrices (norms and biases stay f32)")


def run(args: argparse.Namespace) -> int:
    if args.format == "gguf":
        return _run_gguf(args)
    if args.quant != "f32":
        raise TinyLMError("--quant applies to --format gguf (a transformers folder is stored in --dtype)")
    if read_checkpoint_config(resolve_checkpoint(args.checkpoint)).get("reward_head") == "score":
        out, architecture = export_reward_checkpoint(args.checkpoint, args.out)  # a sequence-classification model
    else:
        out, architecture = export_checkpoint(args.checkpoint, args.out, STORED_DTYPE.get(args.dtype),
                                              merge=args.merge)
    print(f"exported {args.checkpoint} as {architecture} to {out}", file=sys.stderr)
    print(out)
    return 0


def _run_gguf(args: argparse.Namespace) -> int:
    if args.dtype != "auto":
        raise TinyLMError("--dtype applies to --format hf; a GGUF file's matrices are stored in --quant")
    done = export_gguf(args.checkpoint, args.out, args.quant)
    fallback = f"; {len(done.fallbacks)} matrices kept f16 (rows not whole 32-blocks)" if done.fallbacks else ""
    print(f"exported {args.checkpoint} as GGUF ({done.architecture}, {done.quant}, {done.bytes / 2**20:.1f} MiB"
          f"{fallback}) to {done.file}, with an Ollama Modelfile beside it", file=sys.stderr)
    if done.note:
        print(f"note: {done.note}", file=sys.stderr)
    print(done.file)
    return 0
