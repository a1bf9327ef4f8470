"""Loading a checkpoint into a model: a plain one's weights, or an adapter-only one's base with the adapters folded in.

A LoRA run stores only its A and B matrices and the matrices it trained whole, and names its base
(config.json "adapter"; a reward run: "reward_adapter", its language model under `backbone.*`).
Its model is the base's weights with W + s B A merged in, by the one merge in models/lora.py, so
every reader (generate, eval, export, a stage starting from it) loads the same weights.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import torch
from torch import nn

from tinylm.checkpoint.layout import TOKENIZER
from tinylm.checkpoint.read import (
    checkpoint_model_config,
    full_state_dict,
    read_checkpoint_config,
    read_weights,
    refuse_reward_model,
    resolve_checkpoint,
)
from tinylm.errors import TinyLMError
from tinylm.models.factory import build_model
from tinylm.models.lora import merged_weights
from tinylm.models.reward_model import BACKBONE
from tinylm.tokenizer.load import load_tokenizer


def adapter_parts(path: Path, adapter: dict[str, Any], prefix: str = ""
                  ) -> tuple[dict[str, torch.Tensor], dict[str, torch.Tensor], float]:
    """An adapter-only checkpoint as (the weights its adapters apply to: the base's, then the matrices it
    trained whole; the A and B tensors; the scale). `prefix` is where the base's names sit in the stored
    model's (a reward model stores its language model as `backbone.*`, beside its own head)."""
    base_name = adapter.get("base")
    try:
        scale = float(adapter["scale"])
        base = resolve_checkpoint(base_name)
    except (KeyError, TypeError, ValueError):
        raise TinyLMError(f"corrupt checkpoint {path}: its adapter names no base or no scale") from None
    except TinyLMError as exc:
        raise TinyLMError(f"adapter checkpoint {path} needs its base {base_name}: {exc}") from None
    stored = read_weights(path)
    lora = {k: v for k, v in stored.items() if k.endswith((".lora_A", ".lora_B"))}
    whole = {k: v for k, v in stored.items() if k not in lora}
    base_adapter = read_checkpoint_config(base).get("adapter")  # a LoRA run on top of a LoRA run
    base_weights = read_weights(base) if base_adapter is None else adapter_weights(base, base_adapter)
    return {**{prefix + k: v for k, v in base_weights.items()}, **whole}, lora, scale


def adapter_weights(path: Path, adapter: dict[str, Any], prefix: str = "") -> dict[str, torch.Tensor]:
    """The full weights of an adapter-only checkpoint: W + s B A on top of `adapter_parts`' base."""
    return merged_weights(*adapter_parts(path, adapter, prefix))


def reward_checkpoint_weights(ckpt: Path, meta: dict[str, Any]) -> dict[str, torch.Tensor]:
    """A `tinylm reward` checkpoint's full weights (backbone.* and score.weight). A LoRA run stores only the
    adapters, the head and any matrix trained whole, and names its base (config.json "reward_adapter"): its
    backbone is the base's weights with the adapters folded in, by the shared merge (`adapter_weights`)."""
    adapter = meta.get("reward_adapter")
    return read_weights(ckpt) if adapter is None else adapter_weights(ckpt, adapter, prefix=BACKBONE)


def load_weights(model: nn.Module, path: Path) -> None:
    """Load a checkpoint's weights into a plain (unwrapped, unsharded) model, in place.

    An adapter-only checkpoint (a LoRA run: config.json has "adapter") holds only the A and B matrices
    and any matrix it trained whole; its model is its base's weights with the adapters folded in. A reward
    checkpoint is refused by name (`load_reward_model` reads those).
    """
    info = read_checkpoint_config(path)
    refuse_reward_model(path, info)
    adapter = info.get("adapter")
    stored = read_weights(path) if adapter is None else adapter_weights(path, adapter)
    model.load_state_dict(full_state_dict(model, stored, path), strict=True)


def load_model(path: str | Path, device: str | torch.device = "cpu") -> tuple[nn.Module, Any, dict[str, Any]]:
    """(model in eval mode on `device`, tokenizer or None, config.json + "path") for inference users."""
    ckpt = resolve_checkpoint(path)
    meta = read_checkpoint_config(ckpt)
    refuse_reward_model(ckpt, meta)  # before building a model its weights do not fit
    model = build_model(checkpoint_model_config(ckpt))
    load_weights(model, ckpt)
    tokenizer = None
    if (ckpt / TOKENIZER).is_file():
        tokenizer = load_tokenizer(ckpt / TOKENIZER)
    meta["path"] = str(ckpt)
    return model.to(device).eval(), tokenizer, meta
