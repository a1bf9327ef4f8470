"""Checkpoints: one directory per saved step, written atomically, loaded without unpickling.

    RUN/checkpoints/step_00000020/
        model.safetensors   weights (safetensors: no pickle; a tied matrix is stored once)
        config.json         {"format", "step", "tokens", "model": ModelConfig.to_dict(), "train", ...}
        tokenizer.json      copied from the data folder, so a checkpoint is self-contained
        train_state.pt      optimizer, RNG and data-loader state (tensors and containers only)

Everything is written into a hidden temporary directory and renamed into place at the end. A rename
within one filesystem is atomic, so a crash or SIGKILL at any moment leaves either the complete
checkpoint or none: a reader never sees half of one. Leftover temporary directories are ignored and
swept on the next save. Step numbers are zero-padded so names sort like steps.
"""

from __future__ import annotations

import json
import os
import re
import shutil
from pathlib import Path
from typing import Any

import torch
from torch import nn

from tinylm.config import ModelConfig
from tinylm.errors import TinyLMError

FORMAT = "tinylm-checkpoint"
CHECKPOINTS = "checkpoints"
WEIGHTS, CONFIG, TOKENIZER, TRAIN_STATE = "model.safetensors", "config.json", "tokenizer.json", "train_state.pt"
_NAME = re.compile(r"^step_(\d+)$")
# fields that change how a model is computed but not its weights, so resuming with another value is fine
RUNTIME_FIELDS: frozenset[str] = frozenset({"gradient_checkpointing", "attn_impl"})


def checkpoint_name(step: int) -> str:
    return f"step_{step:08d}"


def _fsync_dir(path: Path) -> None:
    try:
        fd = os.open(path, os.O_RDONLY)
    except OSError:  # some filesystems (and Windows) cannot open a directory
        return
    try:
        os.fsync(fd)
    except OSError:
        pass
    finally:
        os.close(fd)


def _fsync_file(path: Path) -> None:
    with open(path, "rb+") as f:
        os.fsync(f.fileno())


def tied_aliases(model: nn.Module) -> dict[str, str]:
    """{alias name: canonical name} for parameters shared between modules (a tied embedding/head)."""
    first: dict[int, str] = {}
    aliases: dict[str, str] = {}
    for name, p in model.named_parameters(remove_duplicate=False):
        if id(p) in first:
            aliases[name] = first[id(p)]
        else:
            first[id(p)] = name
    return aliases


def list_checkpoints(run_dir: str | Path) -> list[Path]:
    """Complete checkpoints of a run, oldest first (temporary and half-deleted ones are skipped)."""
    root = Path(run_dir) / CHECKPOINTS
    if not root.is_dir():
        return []
    found = []
    for child in root.iterdir():
        match = _NAME.match(child.name)
        if match and child.is_dir() and (child / CONFIG).is_file() and (child / WEIGHTS).is_file():
            found.append((int(match.group(1)), child))
    return [path for _, path in sorted(found)]


def save_checkpoint(
    run_dir: str | Path,
    step: int,
    model: nn.Module,
    config: ModelConfig,
    *,
    state_dict: dict[str, torch.Tensor] | None = None,
    tokenizer_file: str | Path | None = None,
    train_state: dict[str, Any] | None = None,
    meta: dict[str, Any] | None = None,
    keep_last: int | None = None,
) -> Path:
    """Write `run_dir/checkpoints/step_N` atomically and return its path.

    `model` is the plain (unwrapped) module; `state_dict` overrides its weights when they had to be
    gathered from shards first (FSDP). `keep_last` deletes all but the newest K checkpoints.
    """
    from safetensors.torch import save_file

    root = Path(run_dir) / CHECKPOINTS
    root.mkdir(parents=True, exist_ok=True)
    final = root / checkpoint_name(step)
    tmp = root / f".tmp-{final.name}-{os.getpid()}"
    if tmp.exists():
        shutil.rmtree(tmp)
    tmp.mkdir()

    weights = model.state_dict() if state_dict is None else state_dict
    aliases = tied_aliases(model)
    tensors = {k: v.detach().to("cpu").contiguous() for k, v in weights.items() if k not in aliases}
    save_file(tensors, str(tmp / WEIGHTS), metadata={"format": "pt", "tied": json.dumps(aliases)})
    info = {"format": FORMAT, "version": 1, "step": step, "model": config.to_dict(), **(meta or {})}
    (tmp / CONFIG).write_text(json.dumps(info, indent=2, default=str) + "\n", encoding="utf-8")
    if tokenizer_file is not None and Path(tokenizer_file).is_file():
        shutil.copyfile(tokenizer_file, tmp / TOKENIZER)
    if train_state is not None:
        torch.save(train_state, tmp / TRAIN_STATE)
    for file in tmp.iterdir():
        _fsync_file(file)
    _fsync_dir(tmp)

    if final.exists():  # the same step saved again (e.g. interrupted right after a resume)
        trash = root / f".old-{final.name}-{os.getpid()}"
        os.replace(final, trash)
        os.replace(tmp, final)
        shutil.rmtree(trash, ignore_errors=True)
    else:
        os.replace(tmp, final)
    _fsync_dir(root)

    for stale in root.glob(".tmp-*"):  # left by a crash in an earlier save
        shutil.rmtree(stale, ignore_errors=True)
    if keep_last is not None and keep_last > 0:
        for old in list_checkpoints(run_dir)[:-keep_last]:
            shutil.rmtree(old, ignore_errors=True)
    return final


def _is_checkpoint(path: Path) -> bool:
    return (path / CONFIG).is_file() or (path / WEIGHTS).is_file()


def resolve_checkpoint(path: str | Path) -> Path:
    """A run folder -> its newest checkpoint; a checkpoint folder -> itself; anything else -> TinyLMError."""
    p = Path(path)
    if not p.exists():
        raise TinyLMError(f"checkpoint not found: {p}")
    if not p.is_dir():
        raise TinyLMError(f"not a checkpoint folder: {p} (expected a directory with {WEIGHTS} and {CONFIG})")
    if not _is_checkpoint(p):
        run_dir = p.parent if p.name == CHECKPOINTS else p
        found = list_checkpoints(run_dir)
        if not found:
            raise TinyLMError(f"no checkpoint in {p} (expected {CHECKPOINTS}/step_N/ with {WEIGHTS})")
        p = found[-1]
    for required in (WEIGHTS, CONFIG):
        if not (p / required).is_file():
            raise TinyLMError(f"corrupt checkpoint {p}: {required} is missing")
    read_checkpoint_config(p)
    return p


def read_checkpoint_config(path: Path) -> dict[str, Any]:
    """config.json of a checkpoint, checked to hold a valid model config."""
    try:
        info = json.loads((path / CONFIG).read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError, json.JSONDecodeError) as exc:
        raise TinyLMError(f"corrupt checkpoint {path}: {CONFIG} cannot be read ({exc})") from None
    if not isinstance(info, dict) or not isinstance(info.get("model"), dict) or "step" not in info:
        raise TinyLMError(f"corrupt checkpoint {path}: {CONFIG} has no 'model' and 'step'")
    return info


def checkpoint_model_config(path: Path) -> ModelConfig:
    try:
        return ModelConfig.from_dict(read_checkpoint_config(path)["model"])
    except (TypeError, ValueError) as exc:
        raise TinyLMError(f"corrupt checkpoint {path}: invalid model config ({exc})") from None


def check_same_model(saved: ModelConfig, requested: ModelConfig, path: Path) -> None:
    """Refuse to load weights into a model they were not trained for, naming every differing field."""
    diff = {k: v for k, v in saved.diff(requested).items() if k not in RUNTIME_FIELDS}
    if diff:
        fields = ", ".join(f"{k} (checkpoint {a!r}, requested {b!r})" for k, (a, b) in diff.items())
        raise TinyLMError(f"checkpoint {path} was trained with a different model: {fields}")


def read_weights(path: Path) -> dict[str, torch.Tensor]:
    """The stored tensors (canonical names only; tied aliases are filled in by `load_weights`)."""
    from safetensors import SafetensorError
    from safetensors.torch import load_file

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


def load_weights(model: nn.Module, path: Path) -> None:
    """Load a checkpoint's weights into a plain (unwrapped, unsharded) model, in place."""
    model.load_state_dict(full_state_dict(model, read_weights(path), path), strict=True)


def has_train_state(path: Path) -> bool:
    """False for a weights-only checkpoint (e.g. one written by `tinylm import`)."""
    return (path / TRAIN_STATE).is_file()


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


def load_model(path: str | Path, device: str | torch.device = "cpu") -> tuple[nn.Module, Any, dict[str, Any]]:
    """(model in eval mode on `device`, tokenizer or None, config.json + "path") for inference users."""
    from tinylm.models.factory import build_model

    ckpt = resolve_checkpoint(path)
    meta = read_checkpoint_config(ckpt)
    model = build_model(checkpoint_model_config(ckpt))
    load_weights(model, ckpt)
    tokenizer = None
    if (ckpt / TOKENIZER).is_file():
        from tinylm.tokenizer import load_tokenizer

        tokenizer = load_tokenizer(ckpt / TOKENIZER)
    meta["path"] = str(ckpt)
    return model.to(device).eval(), tokenizer, meta
