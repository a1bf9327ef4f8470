"""Turn a local Hugging Face `transformers` checkpoint into a tinylm run folder.

Reads Llama, Mistral, Qwen3, Qwen2-MoE, Qwen3-MoE, Mixtral, dense DeepSeek-V3 and GPT-2 (relu, or
GPT-2's own gelu_new) folders saved with `save_pretrained` (config.json, safetensors, tokenizer.json). Whatever tinylm
cannot compute exactly (RoPE scaling, biases, unknown fields) is refused with one line.

  tinylm import ~/models/my-llama --out runs/my-llama
  tinylm generate --checkpoint runs/my-llama --prompt "def "
"""

from __future__ import annotations

import argparse
import sys

from tinylm.interop.hf_import import import_hf

HELP = "convert a local Hugging Face transformers checkpoint into a tinylm checkpoint"


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("hf_dir", metavar="HF_DIR", help="folder with config.json and model.safetensors")
    parser.add_argument("--out", required=True, help="run folder to create (must not exist, or be empty)")


def run(args: argparse.Namespace) -> int:
    checkpoint, architecture = import_hf(args.hf_dir, args.out)
    print(f"imported {architecture} from {args.hf_dir} into {checkpoint}", file=sys.stderr)
    print(checkpoint)
    return 0
