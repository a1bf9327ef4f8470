"""Import a local Hugging Face `transformers` checkpoint as a tinylm run folder.

    HF_DIR (config.json, model.safetensors or sharded *.safetensors, tokenizer.json)
      -> RUN/checkpoints/step_00000000/ (model.safetensors, config.json, tokenizer.json)

The result is an ordinary tinylm checkpoint without training state: `tinylm generate` uses it as is.
A chat model tinylm exported comes back a chat model: its template (tokenizer_config.json) is kept.
Only what maps exactly is accepted (see `interop/hf_config_reader.py`): an unknown architecture, an unknown
config field, a RoPE scaling, a bias, a corrupt weight file are each refused with one line, and
`--out` is written only once the whole checkpoint is ready.
"""

from __future__ import annotations

import json
from pathlib import Path

import torch
from safetensors import SafetensorError
from safetensors.torch import load_file

from tinylm.checkpoint.layout import checkpoint_name
from tinylm.checkpoint.read import full_state_dict
from tinylm.checkpoint.save import save_checkpoint
from tinylm.errors import TinyLMError
from tinylm.interop.hf import hf_architecture, state_dict_from_hf
from tinylm.interop.hf_config_reader import config_from_hf
from tinylm.interop.hf_tokenizer import eot_token, hf_eot_id, tinylm_chat_template
from tinylm.interop.output_folder import output_folder
from tinylm.models.factory import build_model


def read_hf_config(hf_dir: Path) -> dict:
    file = hf_dir / "config.json"
    if not hf_dir.is_dir() or not file.is_file():
        raise TinyLMError(f"not a transformers checkpoint folder: {hf_dir} (no config.json)")
    try:
        data = json.loads(file.read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError, json.JSONDecodeError) as exc:
        raise TinyLMError(f"cannot read {file}: {exc}") from None
    if not isinstance(data, dict):
        raise TinyLMError(f"{file} does not hold a JSON object")
    return data


def read_hf_weights(hf_dir: Path) -> dict[str, torch.Tensor]:
    """All tensors of model.safetensors, or of every shard a model.safetensors.index.json names."""
    index = hf_dir / "model.safetensors.index.json"
    if index.is_file():
        try:
            files = sorted(set(json.loads(index.read_text(encoding="utf-8"))["weight_map"].values()))
        except (OSError, ValueError, KeyError, TypeError, AttributeError) as exc:
            raise TinyLMError(f"cannot read {index}: {exc}") from None
    elif (hf_dir / "model.safetensors").is_file():
        files = ["model.safetensors"]
    else:
        other = [p.name for p in hf_dir.glob("*.bin")]
        hint = f" (found {other[0]}: convert it to safetensors first; tinylm never unpickles weights)" if other else ""
        raise TinyLMError(f"no model.safetensors in {hf_dir}{hint}")
    weights: dict[str, torch.Tensor] = {}
    for name in files:
        try:
            weights.update(load_file(str(hf_dir / name), device="cpu"))
        except (SafetensorError, OSError, ValueError, RuntimeError) as exc:
            raise TinyLMError(f"corrupt weights file {hf_dir / name}: {str(exc).splitlines()[0]}") from None
    return weights


def import_hf(hf_dir: str | Path, out: str | Path) -> tuple[Path, str]:
    """Write the tinylm run folder `out` from a transformers folder; return (checkpoint path, source class)."""
    hf_dir = Path(hf_dir)
    config = config_from_hf(read_hf_config(hf_dir))
    architecture = hf_architecture(config)
    model = build_model(config)
    weights = full_state_dict(model, state_dict_from_hf(read_hf_weights(hf_dir), config), hf_dir)
    model.load_state_dict({k: v.to(torch.float32) for k, v in weights.items()}, strict=True)

    tokenizer_file = hf_dir / "tokenizer.json"
    meta: dict = {"imported_from": str(hf_dir.resolve()), "hf_architecture": architecture}
    if tokenizer_file.is_file():
        meta["eot_id"] = eot_token(tokenizer_file, hf_eot_id(hf_dir))[0]
        chat_template = tinylm_chat_template(hf_dir)
        if chat_template is not None:  # an exported chat model: it stays one (`tinylm chat` reads this)
            meta["chat_template"] = chat_template
    with output_folder(out) as folder:
        save_checkpoint(folder, 0, model, config, tokenizer_file=tokenizer_file if tokenizer_file.is_file() else None,
                        meta=meta)
    return Path(out) / "checkpoints" / checkpoint_name(0), architecture
