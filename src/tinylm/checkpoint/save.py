"""Writing a checkpoint atomically: a whole `step_N` folder or nothing, the model config bound to the weights.

A checkpoint is written into a hidden `.tmp-` folder, every file flushed to disk, and renamed into
place; a rename within one filesystem is atomic, so a crash or SIGKILL at any moment leaves whole
checkpoints and hidden leftovers (which `sweep_leftovers` removes). A tied matrix is stored once,
and the model config goes into the safetensors header too, so a reader can tell a config.json
that is not the one these weights were written with.
"""

from __future__ import annotations

import contextlib
import json
import os
import shutil
import stat
from pathlib import Path
from typing import Any

import torch
from torch import nn

from tinylm.checkpoint.layout import (
    CHECKPOINTS,
    CONFIG,
    FORMAT,
    MODEL_METADATA,
    RUNTIME_FIELDS,
    TOKENIZER,
    TRAIN_STATE,
    WEIGHTS,
    checkpoint_name,
    list_checkpoints,
    tied_aliases,
)
from tinylm.checkpoint.prune import checkpoints_to_prune, remove_checkpoint, sweep_leftovers
from tinylm.checkpoint.read import read_checkpoint_config
from tinylm.config import ModelConfig
from tinylm.errors import TinyLMError, io_failure


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


def _bound_model_json(config: ModelConfig) -> str:
    """The config in canonical JSON, without the fields that do not shape the weights."""
    fields = {k: v for k, v in config.to_dict().items() if k not in RUNTIME_FIELDS}
    return json.dumps(fields, sort_keys=True, separators=(",", ":"), default=str)


def save_safetensors(tensors: dict[str, torch.Tensor], file: str | Path, metadata: dict[str, str]) -> None:
    """safetensors' `save_file`, leaving the file the mode an ordinary new file gets (the umask's).

    safetensors >= 0.8 writes through a temporary file created 0600 and renames it into place, so the
    weights would be unreadable to anyone else: another user, or a container's non-root user.
    """
    from safetensors.torch import save_file  # looked up per call: tests replace it to fake a full disk

    file = Path(file)
    file.touch()  # created as any file is (or an existing one's mode kept)
    mode = stat.S_IMODE(file.stat().st_mode)
    save_file(tensors, str(file), metadata=metadata)
    os.chmod(file, mode)


def _write_files(folder: Path, model: nn.Module, config: ModelConfig, state_dict: dict[str, torch.Tensor] | None,
                 tokenizer_file: str | Path | None, train_state: dict[str, Any] | None, info: dict[str, Any]) -> None:
    weights = model.state_dict() if state_dict is None else state_dict
    aliases = tied_aliases(model)
    tensors = {k: v.detach().to("cpu").contiguous() for k, v in weights.items() if k not in aliases}
    (folder / CONFIG).write_text(json.dumps(info, indent=2, default=str) + "\n", encoding="utf-8")
    metadata = {"format": "pt", "tied": json.dumps(aliases), MODEL_METADATA: _bound_model_json(config)}
    save_safetensors(tensors, folder / WEIGHTS, metadata)
    if tokenizer_file is not None and Path(tokenizer_file).is_file():
        shutil.copyfile(tokenizer_file, folder / TOKENIZER)
    if train_state is not None:
        with open(folder / TRAIN_STATE, "wb") as f:  # our own file object: a full disk is an OSError
            torch.save(train_state, f)
    for file in folder.iterdir():
        _fsync_file(file)
    _fsync_dir(folder)


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
    gathered from shards first (FSDP). `keep_last` prunes all but the newest K checkpoints, never the
    newest one with full training state. A write that fails (full disk, read-only folder) leaves
    nothing behind and raises one TinyLMError line.
    """
    root = Path(run_dir) / CHECKPOINTS
    final = root / checkpoint_name(step)
    tmp = root / f".tmp-{final.name}-{os.getpid()}"
    info = {"format": FORMAT, "version": 1, "step": step, "model": config.to_dict(), **(meta or {})}
    try:
        root.mkdir(parents=True, exist_ok=True)
        sweep_leftovers(run_dir)  # first: a crash's leftovers may hold the space this save needs
        tmp.mkdir()
        _write_files(tmp, model, config, state_dict, tokenizer_file, train_state, info)
        if final.exists():  # the same step saved again (e.g. interrupted right after a resume)
            old = root / f".old-{final.name}-{os.getpid()}"
            os.replace(final, old)
            os.replace(tmp, final)
            shutil.rmtree(old, ignore_errors=True)
        else:
            os.replace(tmp, final)
        _fsync_dir(root)
    except BaseException as exc:  # Ctrl-C and bugs included: never leave the temporary folder behind
        shutil.rmtree(tmp, ignore_errors=True)
        reason = io_failure(exc)
        if reason is None:
            raise
        raise TinyLMError(f"cannot write checkpoint to {root}: {reason}") from None
    if keep_last is not None and keep_last > 0:
        for old in checkpoints_to_prune(list_checkpoints(run_dir), keep_last):
            try:
                remove_checkpoint(old)
            except OSError as exc:
                raise TinyLMError(f"saved {final.name} but cannot remove {old}: {exc.strerror or exc}") from None
    return final


def update_checkpoint_config(path: str | Path, **fields: Any) -> dict[str, Any]:
    """Set top-level fields of a checkpoint's config.json (a chat template, lineage), atomically.

    The model config is bound to the weights and cannot be changed this way.
    """
    path = Path(path)
    if "model" in fields or "format" in fields:
        raise TinyLMError(f"the model config of {path} is bound to its weights: it cannot be updated")
    info = {**read_checkpoint_config(path), **fields}
    tmp = path / f".{CONFIG}.tmp-{os.getpid()}"
    try:
        tmp.write_text(json.dumps(info, indent=2, default=str) + "\n", encoding="utf-8")
        _fsync_file(tmp)
        os.replace(tmp, path / CONFIG)
    except OSError as exc:
        with contextlib.suppress(OSError):
            tmp.unlink()
        raise TinyLMError(f"cannot update {path / CONFIG}: {exc.strerror or exc}") from None
    _fsync_dir(path)
    return info
