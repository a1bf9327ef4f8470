"""The names of a checkpoint on disk, and which folders of a run count as checkpoints.

    RUN/checkpoints/step_00000020/   model.safetensors, config.json, tokenizer.json, train_state.pt

Every reader and writer takes the file names from here, so they cannot drift apart. Step numbers
are zero-padded so names sort like steps; a folder is a checkpoint only once it holds both its
config and its weights, so hidden `.tmp-`/`.trash-`/`.old-` folders and half-deleted ones never count.
"""

from __future__ import annotations

import re
from pathlib import Path

from torch import nn

FORMAT = "tinylm-checkpoint"
CHECKPOINTS = "checkpoints"
SNAPSHOTS = "snapshots"  # RUN/snapshots/checkpoints/step_N: weights only, every --snapshot-every steps
WEIGHTS, CONFIG, TOKENIZER, TRAIN_STATE = "model.safetensors", "config.json", "tokenizer.json", "train_state.pt"
MODEL_METADATA = "tinylm_model"  # key of the bound model config in the safetensors header
STEP_NAME = re.compile(r"^step_(\d+)$")
# fields that change how a model is computed but not its weights, so resuming with another value is fine
RUNTIME_FIELDS: frozenset[str] = frozenset({"gradient_checkpointing", "attn_impl"})


def checkpoint_name(step: int) -> str:
    return f"step_{step:08d}"


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


def is_complete(path: Path) -> bool:
    return path.is_dir() and (path / CONFIG).is_file() and (path / WEIGHTS).is_file()


def list_checkpoints(run_dir: str | Path) -> list[Path]:
    """Complete checkpoints of a run, oldest first (temporary and half-deleted ones are skipped)."""
    root = Path(run_dir) / CHECKPOINTS
    if not root.is_dir():
        return []
    found = []
    for child in root.iterdir():
        match = STEP_NAME.match(child.name)
        if match and is_complete(child):
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
