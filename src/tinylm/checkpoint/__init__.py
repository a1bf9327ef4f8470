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

This module is the one place callers import from; each part lives in its own module:

    checkpoint/layout.py   file names, step names, which folders count, tied aliases
    checkpoint/save.py     the atomic save, config.json updates, safetensors with ordinary file modes
    checkpoint/prune.py    pruning, and sweeping what crashed saves and prunes left
    checkpoint/read.py     resolving a path, reading config, weights and train state, every refusal
    checkpoint/load.py     weights into a model, LoRA adapters folded into their base
"""

from __future__ import annotations

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
    has_train_state,
    list_checkpoints,
    newest_resumable,
    tied_aliases,
)
from tinylm.checkpoint.load import adapter_parts, adapter_weights, load_model, load_weights, reward_checkpoint_weights
from tinylm.checkpoint.prune import checkpoints_to_prune, remove_checkpoint, sweep_leftovers
from tinylm.checkpoint.read import (
    check_config_matches_weights,
    check_same_model,
    checkpoint_model_config,
    full_state_dict,
    load_train_state,
    read_checkpoint_config,
    read_weights,
    resolve_checkpoint,
)
from tinylm.checkpoint.save import save_checkpoint, save_safetensors, update_checkpoint_config

__all__ = [
    "CHECKPOINTS", "CONFIG", "FORMAT", "MODEL_METADATA", "RUNTIME_FIELDS", "TOKENIZER", "TRAIN_STATE", "WEIGHTS",
    "adapter_parts", "adapter_weights", "check_config_matches_weights", "check_same_model", "checkpoint_model_config",
    "checkpoint_name", "checkpoints_to_prune", "full_state_dict", "has_train_state", "list_checkpoints",
    "load_model", "load_train_state", "load_weights", "newest_resumable", "read_checkpoint_config", "read_weights",
    "remove_checkpoint", "resolve_checkpoint", "reward_checkpoint_weights", "save_checkpoint", "save_safetensors",
    "sweep_leftovers", "tied_aliases", "update_checkpoint_config",
]
