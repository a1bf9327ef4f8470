"""Checkpoints: one directory per saved step, written atomically, loaded without unpickling.

    RUN/checkpoints/step_00000020/
        model.safetensors   weights (safetensors: no pickle; a tied matrix is stored once), and in its
                            metadata the model config they were written with
        config.json         {"format", "step", "tokens", "model": ModelConfig.to_dict(), "train", ...}
        tokenizer.json      copied from the data folder, so a checkpoint is self-contained
        train_state.pt      optimizer, RNG and data-loader state (tensors and containers only)

Nothing is ever half there. A checkpoint is written into a hidden `.tmp-` folder and renamed into
place; an old one is pruned by renaming it to a hidden `.trash-` name first and deleting it after.
A rename within one filesystem is atomic, so a crash or SIGKILL at any moment leaves whole
checkpoints and hidden leftovers, which `sweep_leftovers` removes at the next save or run start.

The weights carry the model config they were written with, because a config.json edited or copied
from another run still loads when the shapes happen to fit (another n_head, rope_theta) and then
computes a different model without a word. Step numbers are zero-padded so names sort like steps.
"""

from __future__ import annotations

import contextlib
import json
import os
import re
import shutil
import stat
from pathlib import Path
from typing import Any

import torch
from torch import nn

from tinylm.config import ModelConfig
from tinylm.errors import TinyLMError, io_failure

FORMAT = "tinylm-checkpoint"
CHECKPOINTS = "checkpoints"
WEIGHTS, CONFIG, TOKENIZER, TRAIN_STATE = "model.safetensors", "config.json", "tokenizer.json", "train_state.pt"
MODEL_METADATA = "tinylm_model"  # key of the bound model config in the safetensors header
_NAME = re.compile(r"^step_(\d+)$")
_LEFTOVER = re.compile(r"^\.(tmp|trash|old)-(step_\d+)-\d+$")
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


def _is_complete(path: Path) -> bool:
    return path.is_dir() and (path / CONFIG).is_file() and (path / WEIGHTS).is_file()


def list_checkpoints(run_dir: str | Path) -> list[Path]:
    """Complete checkpoints of a run, oldest first (temporary and half-deleted ones are skipped)."""
    root = Path(run_dir) / CHECKPOINTS
    if not root.is_dir():
        return []
    found = []
    for child in root.iterdir():
        match = _NAME.match(child.name)
        if match and _is_complete(child):
            found.append((int(match.group(1)), child))
    return [path for _, path in sorted(found)]


def has_train_state(path: Path) -> bool:
    """False for a weights-only checkpoint (e.g. one written by `tinylm import`)."""
    return (path / TRAIN_STATE).is_file()


def newest_resumable(run_dir: str | Path) -> tuple[Path | None, list[Path]]:
    """(the newest checkpoint with full training state, the newer weights-only ones it passed over)."""
    skipped: list[Path] = []
    for path in reversed(list_checkpoints(run_dir)):
        if has_train_state(path):
            return path, skipped[::-1]
        skipped.append(path)
    return None, skipped[::-1]


# ---- the model config bound to the weights ------------------------------------------------------
def _bound_model_json(config: ModelConfig) -> str:
    """The config in canonical JSON, without the fields that do not shape the weights."""
    fields = {k: v for k, v in config.to_dict().items() if k not in RUNTIME_FIELDS}
    return json.dumps(fields, sort_keys=True, separators=(",", ":"), default=str)


def check_config_matches_weights(path: Path, config: ModelConfig) -> None:
    """Refuse a config.json that is not the one the weights were written with, naming each field.

    Checkpoints written before the binding existed carry no such metadata and are trusted as before.
    """
    from safetensors import SafetensorError, safe_open

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


# ---- writing ------------------------------------------------------------------------------------
def save_safetensors(tensors: dict[str, torch.Tensor], file: str | Path, metadata: dict[str, str]) -> None:
    """safetensors' `save_file`, leaving the file the mode an ordinary new file gets (the umask's).

    safetensors >= 0.8 writes through a temporary file created 0600 and renames it into place, so the
    weights would be unreadable to anyone else: another user, or a container's non-root user.
    """
    from safetensors.torch import save_file

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


# ---- pruning and crash leftovers ----------------------------------------------------------------
def checkpoints_to_prune(checkpoints: list[Path], keep_last: int) -> list[Path]:
    """All but the newest `keep_last` (oldest first), sparing the newest one a run can resume from."""
    if keep_last <= 0:
        return []
    resumable = [path for path in checkpoints if has_train_state(path)]
    spared = resumable[-1] if resumable else None
    return [path for path in checkpoints[:-keep_last] if path != spared]


def remove_checkpoint(path: Path) -> None:
    """Rename to a hidden `.trash-` name (atomic: never seen half-deleted), then delete."""
    trash = path.parent / f".trash-{path.name}-{os.getpid()}"
    os.replace(path, trash)
    shutil.rmtree(trash, ignore_errors=True)


def sweep_leftovers(run_dir: str | Path) -> list[str]:
    """Remove what crashed saves and prunes left in RUN/checkpoints; one line per thing done.

    `.tmp-` (a save cut short) and `.trash-` (a prune cut short) folders go; an `.old-` folder is the
    previous copy of a step being saved again and is put back if the new copy never arrived; a step
    folder without its weights (half-deleted by an older tinylm) goes. One that still has its weights
    but lost config.json is left for its owner: `resolve_checkpoint` names what is missing.
    Only the process that holds the run folder's lock may call this.
    """
    root = Path(run_dir) / CHECKPOINTS
    if not root.is_dir():
        return []
    done: list[str] = []
    for child in sorted(root.iterdir()):
        leftover = _LEFTOVER.match(child.name)
        if leftover and leftover.group(1) == "old" and not (root / leftover.group(2)).exists() and _is_complete(child):
            os.replace(child, root / leftover.group(2))
            done.append(f"restored {leftover.group(2)} from an interrupted re-save")
        elif leftover or (_NAME.match(child.name) and child.is_dir() and not (child / WEIGHTS).is_file()):
            shutil.rmtree(child, ignore_errors=True)
            what = {"tmp": "an interrupted save", "trash": "an interrupted prune", "old": "a finished re-save"}
            done.append(f"removed {child.name} ({what[leftover.group(1)] if leftover else 'no weights'})")
    for stale in root.glob(f"step_*/.{CONFIG}.tmp-*"):  # an interrupted update_checkpoint_config
        stale.unlink(missing_ok=True)
    return done


# ---- finding and reading ------------------------------------------------------------------------
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
    return sorted(p for p in root.iterdir() if _NAME.match(p.name) and p.is_dir() and not _is_complete(p))


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
    from safetensors import SafetensorError
    from safetensors.torch import load_file

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


def load_weights(model: nn.Module, path: Path) -> None:
    """Load a checkpoint's weights into a plain (unwrapped, unsharded) model, in place.

    An adapter-only checkpoint (a LoRA run: config.json has "adapter") holds only the A and B matrices
    and any matrix it trained whole; its model is its base's weights with the adapters folded in.
    """
    adapter = read_checkpoint_config(path).get("adapter")
    stored = read_weights(path) if adapter is None else adapter_weights(path, adapter)
    model.load_state_dict(full_state_dict(model, stored, path), strict=True)


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
    from tinylm.models.lora import merged_weights

    return merged_weights(*adapter_parts(path, adapter, prefix))


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
