"""Export a tinylm checkpoint as a Hugging Face `transformers` folder.

    DIR/config.json              the matching transformers architecture (see interop/hf.py)
    DIR/model.safetensors        our weights under transformers names, a tied matrix stored once
    DIR/generation_config.json   BOS/PAD = our end-of-text token, EOS too (a chat model's: it and <|end|>)
    DIR/tokenizer.json           our tokenizer, unchanged
    DIR/tokenizer_config.json    what AutoTokenizer needs to run it, with the chat template of a chat model
    DIR/adapter/                 a LoRA run's adapters in PEFT's format (DIR is then the base they apply to)

`AutoModelForCausalLM.from_pretrained(DIR)` and `AutoTokenizer.from_pretrained(DIR)` load it offline,
and `peft.PeftModel.from_pretrained(model, DIR/adapter)` adds a LoRA run's adapters (or `merge=True`
exports the merged model instead). A model with no exact counterpart is refused before anything is
written, and the folder appears only once it is complete.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import torch

from tinylm.checkpoint.layout import TOKENIZER, tied_aliases
from tinylm.checkpoint.load import adapter_parts
from tinylm.checkpoint.read import (
    checkpoint_model_config,
    full_state_dict,
    read_checkpoint_config,
    read_weights,
    resolve_checkpoint,
)
from tinylm.errors import TinyLMError
from tinylm.interop.hf import hf_architecture, write_hf_folder
from tinylm.interop.hf_tokenizer import end_token_ids, write_hf_tokenizer
from tinylm.interop.output_folder import output_folder
from tinylm.interop.peft_export import write_peft_adapter
from tinylm.models.factory import build_model
from tinylm.models.lora import LoraConfig, apply_lora, load_lora_state_dict, merged_weights

DTYPES = {"float32": torch.float32, "bfloat16": torch.bfloat16, "float16": torch.float16}


def export_checkpoint(checkpoint: str | Path, out: str | Path, dtype: str | None = None,
                      merge: bool = False) -> tuple[Path, str]:
    """Write `out` from a checkpoint (or the newest one of a run folder); return (out, transformers class).

    A LoRA run's adapter-only checkpoint becomes its base (the weights the adapters apply to) plus
    `out/adapter` in PEFT's format, or with `merge` one model with the adapters folded in.
    """
    ckpt = resolve_checkpoint(checkpoint)
    info = read_checkpoint_config(ckpt)
    config = checkpoint_model_config(ckpt)
    architecture = hf_architecture(config)  # refuses before anything is read or written
    tokenizer_file = ckpt / TOKENIZER
    if not tokenizer_file.is_file():
        raise TinyLMError(f"checkpoint {ckpt} has no {TOKENIZER}: transformers needs one next to the model")
    adapter = info.get("adapter")
    lora: dict[str, torch.Tensor] = {}
    if adapter is None:
        stored = read_weights(ckpt)
    else:
        stored, lora, scale = adapter_parts(ckpt, adapter)
        if merge:
            stored, lora = merged_weights(stored, lora, scale), {}
    weights = canonical_weights(config, stored, ckpt, dtype)

    with output_folder(out) as folder:
        chat_template = info.get("chat_template")
        eot_id = write_hf_tokenizer(tokenizer_file, folder, config.context_length, chat_template=chat_template)
        token_ids = {"bos_token_id": eot_id, "eos_token_id": end_token_ids(tokenizer_file, eot_id, chat_template),
                     "pad_token_id": eot_id}
        write_hf_folder(folder, weights, config, **token_ids)
        generation = {**token_ids, "_from_model_config": False}
        (folder / "generation_config.json").write_text(json.dumps(generation, indent=2) + "\n", encoding="utf-8")
        if lora:
            _write_adapter(folder / "adapter", config, weights, lora, adapter, base_name=str(Path(out).resolve()))
    return Path(out), architecture


def canonical_weights(config: Any, stored: dict[str, torch.Tensor], ckpt: Path, dtype: str | None
                       ) -> dict[str, torch.Tensor]:
    """The model's weights under tinylm names, checked against its shapes, each tied matrix once."""
    with torch.device("meta"):
        shapes = build_model(config)
    weights = full_state_dict(shapes, stored, ckpt)  # names and shapes checked
    for alias in tied_aliases(shapes):
        weights.pop(alias, None)
    if dtype is not None:
        weights = {k: v.to(DTYPES[dtype]) if v.is_floating_point() else v for k, v in weights.items()}
    return weights


def _write_adapter(folder: Path, config: Any, base: dict[str, torch.Tensor], lora: dict[str, torch.Tensor],
                   adapter: dict[str, Any], base_name: str) -> None:
    """The adapters in PEFT's format, through a model wrapped exactly as training wrapped it."""
    model = build_model(config)
    model.load_state_dict(full_state_dict(model, base, folder))
    cfg = LoraConfig.from_dict(adapter["lora"])
    apply_lora(model, cfg)
    load_lora_state_dict(model, lora)
    write_peft_adapter(model, cfg, folder, base_name)
