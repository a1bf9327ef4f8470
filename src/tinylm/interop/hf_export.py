"""Export a tinylm checkpoint as a Hugging Face `transformers` folder.

    DIR/config.json              the matching transformers architecture (see interop/hf.py)
    DIR/model.safetensors        our weights under transformers names, a tied matrix stored once
    DIR/generation_config.json   EOS/BOS/PAD = our end-of-text token
    DIR/tokenizer.json           our tokenizer, unchanged
    DIR/tokenizer_config.json    what AutoTokenizer needs to run it

`AutoModelForCausalLM.from_pretrained(DIR)` and `AutoTokenizer.from_pretrained(DIR)` load it offline.
A model with no exact counterpart is refused before anything is written, and the folder appears
only once it is complete.
"""

from __future__ import annotations

import json
from pathlib import Path

import torch

from tinylm.errors import TinyLMError
from tinylm.interop.hf import hf_architecture, write_hf_folder
from tinylm.interop.hf_tokenizer import write_hf_tokenizer
from tinylm.interop.output_folder import output_folder

DTYPES = {"float32": torch.float32, "bfloat16": torch.bfloat16, "float16": torch.float16}


def export_checkpoint(checkpoint: str | Path, out: str | Path, dtype: str | None = None) -> tuple[Path, str]:
    """Write `out` from a checkpoint (or the newest one of a run folder); return (out, transformers class)."""
    from tinylm.checkpoint import (
        TOKENIZER,
        checkpoint_model_config,
        full_state_dict,
        read_weights,
        resolve_checkpoint,
        tied_aliases,
    )
    from tinylm.models.factory import build_model

    ckpt = resolve_checkpoint(checkpoint)
    config = checkpoint_model_config(ckpt)
    architecture = hf_architecture(config)  # refuses before anything is read or written
    tokenizer_file = ckpt / TOKENIZER
    if not tokenizer_file.is_file():
        raise TinyLMError(f"checkpoint {ckpt} has no {TOKENIZER}: transformers needs one next to the model")
    with torch.device("meta"):
        shapes = build_model(config)
    weights = full_state_dict(shapes, read_weights(ckpt), ckpt)  # names and shapes checked
    for alias in tied_aliases(shapes):
        weights.pop(alias, None)
    if dtype is not None:
        weights = {k: v.to(DTYPES[dtype]) if v.is_floating_point() else v for k, v in weights.items()}

    with output_folder(out) as folder:
        eot_id = write_hf_tokenizer(tokenizer_file, folder, config.context_length)
        token_ids = {"bos_token_id": eot_id, "eos_token_id": eot_id, "pad_token_id": eot_id}
        write_hf_folder(folder, weights, config, **token_ids)
        generation = {**token_ids, "_from_model_config": False}
        (folder / "generation_config.json").write_text(json.dumps(generation, indent=2) + "\n", encoding="utf-8")
    return Path(out), architecture
