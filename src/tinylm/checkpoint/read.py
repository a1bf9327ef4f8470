"""Finding a checkpoint and reading it, refusing whatever is missing, corrupt or not the model it claims.

A run folder resolves to its newest complete checkpoint. Weights are read with safetensors and the
training state with `weights_only=True`, so nothing is ever unpickled; the model config in
config.json is checked against the one bound into the weights' header, because a config.json
edited or copied from another run still loads when the shapes happen to fit (another n_head,
rope_theta) and then computes a different model without a word.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import torch
from safetensors import SafetensorError, safe_open
from safetensors.torch import load_file
from torch import nn

from tinylm.checkpoint.layout import (
    CHECKPOINTS,
    CONFIG,
    FORMAT,
    MODEL_METADATA,
    RUNTIME_FIELDS,
    STEP_NAME,
    TRAIN_STATE,
    WEIGHTS,
    is_complete,
    list_checkpoints,
    tied_aliases,
)
from tinylm.config import ModelConfig
from tinylm.errors import TinyLMError


def _is_checkpoint(path: Path) -> bool:
    return (path / CONFIG).is_file() or (path / WEIGHTS).is_file()


def _is_hf_model_folder(path: Path) -> bool:
    """A transformers folder: its config.json names a model type or architecture and no tinylm format."""
    try:
        info = json.loads((path / CONFIG).read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError, json.JSONDecodeError):
        return False
    return isinstance(info, dict) and info.get("format") != FORMAT and ("model_type" in info or "architectures" in info)


def _incomplete(run_dir: Path) -> list[Path]:
    root = run_dir / CHECKPOINTS
    if not root.is_dir():
        return []
    return sorted(p for p in root.iterdir() if STEP_NAME.match(p.name) and p.is_dir() and not is_complete(p))


def resolve_checkpoint(path: str | Path) -> Path:
    """A run folder -> its newest checkpoint; a checkpoint folder -> itself; anything else -> TinyLMError."""
    p = Path(path)
    if not p.exists():
        raise TinyLMError(f"checkpoint not found: {p}")
    if not p.is_dir():
        raise TinyLMError(f"not a checkpoint folder: {p} (expected a directory with {WEIGHTS} and {CONFIG})")
    if _is_hf_model_folder(p):
        raise TinyLMError(f"{p} is a Hugging Face model folder, not a tinylm checkpoint: "
                          f"convert it with `tinylm import {p} --out DIR`")
    if not _is_checkpoint(p):
        run_dir = p.parent if p.name == CHECKPOINTS else p
        found = list_checkpoints(run_dir)
        if not found and _incomplete(run_dir):
            p = _incomplete(run_dir)[-1]  # report what is missing in it below
        elif not found:
            raise TinyLMError(f"no checkpoint in {p} (expected {CHECKPOINTS}/step_N/ with {WEIGHTS})")
        else:
            p = found[-1]
    for required in (CONFIG, WEIGHTS):
        if not (p / required).is_file():
            raise TinyLMError(f"corrupt checkpoint {p}: {required} is missing")
    read_checkpoint_config(p)
    return p


def read_checkpoint_config(path: Path) -> dict[str, Any]:
    """config.json of a checkpoint (every key, lineage and chat template included), checked to hold a model."""
    try:
        info = json.loads((path / CONFIG).read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError, json.JSONDecodeError) as exc:
        raise TinyLMError(f"corrupt checkpoint {path}: {CONFIG} cannot be read ({exc})") from None
    if not isinstance(info, dict) or not isinstance(info.get("model"), dict) or "step" not in info:
        raise TinyLMError(f"corrupt checkpoint {path}: {CONFIG} has no 'model' and 'step'")
    return info


def refuse_reward_model(path: Path, info: dict[str, Any]) -> None:
    """Name a `tinylm reward` checkpoint for what it is where a language model is expected: its weights sit under
    `backbone.*` beside a score head, so loading them as a language model would only say they do not fit."""
    if info.get("reward_head") is not None:
        raise TinyLMError(f"{path} is a reward model (a `tinylm reward` checkpoint), not a language model: use it "
                          f"as RL's reward (`tinylm rl --reward model:{path}`) or export it (`tinylm export`)")


def check_config_matches_weights(path: Path, config: ModelConfig) -> None:
    """Refuse a config.json that is not the one the weights were written with, naming each field.

    Checkpoints written before the binding existed carry no such metadata and are trusted as before.
    """
    try:
        with safe_open(str(path / WEIGHTS), "pt") as f:
            bound = (f.metadata() or {}).get(MODEL_METADATA)
    except (SafetensorError, OSError, ValueError, RuntimeError) as exc:
        raise TinyLMError(f"corrupt checkpoint {path}: {WEIGHTS} cannot be read ({exc})") from None
    if bound is None:
        return
    try:
        written = ModelConfig.from_dict({**config.to_dict(), **json.loads(bound)})
    except (TypeError, ValueError) as exc:
        raise TinyLMError(f"corrupt checkpoint {path}: the model config in {WEIGHTS} is invalid ({exc})") from None
    diff = {k: v for k, v in config.diff(written).items() if k not in RUNTIME_FIELDS}
    if diff:
        fields = ", ".join(f"{k}: config {a!r}, weights written with {b!r}" for k, (a, b) in diff.items())
        raise TinyLMError(f"corrupt checkpoint {path}: {CONFIG} does not match {WEIGHTS} ({fields})")


def checkpoint_model_config(path: Path) -> ModelConfig:
    """The model config of a checkpoint, checked to be the one its weights were written with."""
    try:
        config = ModelConfig.from_dict(read_checkpoint_config(path)["model"])
    except (TypeError, ValueError) as exc:
        raise TinyLMError(f"corrupt checkpoint {path}: invalid model config ({exc})") from None
    check_config_matches_weights(path, config)
    return config


def check_same_model(saved: ModelConfig, requested: ModelConfig, path: Path) -> None:
    """Refuse to load weights into a model they were not trained for, naming every differing field."""
    diff = {k: v for k, v in saved.diff(requested).items() if k not in RUNTIME_FIELDS}
    if diff:
        fields = ", ".join(f"{k} (checkpoint {a!r}, requested {b!r})" for k, (a, b) in diff.items())
        raise TinyLMError(f"checkpoint {path} was trained with a different model: {fields}")


def read_weights(path: Path) -> dict[str, torch.Tensor]:
    """The stored tensors (canonical names only; tied aliases are filled in by `load_weights`).

    config.json is checked against the weights first, so whoever reads them reads the model they are.
    """
    checkpoint_model_config(path)
    try:
        return load_file(str(path / WEIGHTS), device="cpu")
    except (SafetensorError, OSError, ValueError, RuntimeError) as exc:
        raise TinyLMError(f"corrupt checkpoint {path}: {WEIGHTS} cannot be read ({exc})") from None


def full_state_dict(model: nn.Module, stored: dict[str, torch.Tensor], path: Path) -> dict[str, torch.Tensor]:
    """Stored tensors plus tied aliases, checked against the model's names and shapes."""
    weights = dict(stored)
    for alias, canonical in tied_aliases(model).items():
        if canonical in weights:
            weights[alias] = weights[canonical]
    expected = model.state_dict()
    missing = sorted(set(expected) - set(weights))
    unexpected = sorted(set(weights) - set(expected))
    if missing or unexpected:
        raise TinyLMError(f"corrupt checkpoint {path}: weights do not fit the model "
                          f"(missing {missing[:3]}, unexpected {unexpected[:3]})")
    for name, tensor in expected.items():
        if tuple(weights[name].shape) != tuple(tensor.shape):
            raise TinyLMError(f"corrupt checkpoint {path}: {name} has shape {tuple(weights[name].shape)}, "
                              f"the model expects {tuple(tensor.shape)}")
    return weights


def load_train_state(path: Path) -> dict[str, Any]:
    """train_state.pt with `weights_only=True`: tensors and containers, never arbitrary objects."""
    file = path / TRAIN_STATE
    if not file.is_file():
        raise TinyLMError(f"checkpoint {path} has no {TRAIN_STATE}: it can be loaded but not resumed")
    try:
        return torch.load(file, map_location="cpu", weights_only=True)
    except Exception as exc:  # noqa: BLE001 - any failure to read it means the file is damaged
        raise TinyLMError(f"corrupt checkpoint {path}: {TRAIN_STATE} cannot be read "
                          f"({type(exc).__name__}: {str(exc).splitlines()[0] if str(exc) else ''})") from None
