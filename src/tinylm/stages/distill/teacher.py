"""The teacher: any tinylm checkpoint (an imported `transformers` model included) that splits text as the
student does, frozen, in eval mode, never given a gradient.

Everything that can be refused is refused before the weights are read, in one line: a missing
checkpoint, a reward model (a score head, not next-token logits), weights larger than the memory
this machine has free, a tokenizer other than the student's (no guess across two vocabularies: the
divergence compares distributions over the same ids).
"""

from __future__ import annotations

import hashlib
import os
from pathlib import Path
from typing import Any

import torch
from torch import nn

from tinylm.checkpoint import TOKENIZER, WEIGHTS, load_model, read_checkpoint_config, resolve_checkpoint
from tinylm.checkpoint.read import refuse_reward_model
from tinylm.errors import TinyLMError
from tinylm.tokenizer import load_tokenizer


def available_memory() -> int | None:
    """Bytes of memory free for a new allocation (Linux MemAvailable), None where it cannot be read."""
    try:
        for line in Path("/proc/meminfo").read_text().splitlines():
            if line.startswith("MemAvailable:"):
                return int(line.split()[1]) * 1024
    except OSError:
        pass
    try:
        return os.sysconf("SC_AVPHYS_PAGES") * os.sysconf("SC_PAGE_SIZE")
    except (ValueError, OSError, AttributeError):
        return None


def fingerprint(checkpoint: Path) -> str:
    """sha256 of the teacher's weights and model config: a cache written from other weights is another teacher's."""
    digest = hashlib.sha256()
    with open(checkpoint / WEIGHTS, "rb") as f:
        for block in iter(lambda: f.read(1 << 20), b""):
            digest.update(block)
    digest.update(repr(sorted(read_checkpoint_config(checkpoint).get("model", {}).items())).encode())
    return digest.hexdigest()


def teacher_checkpoint(path: str) -> Path:
    """The teacher's checkpoint folder, refused before loading when it cannot be a teacher on this machine."""
    checkpoint = resolve_checkpoint(path)
    info = read_checkpoint_config(checkpoint)
    refuse_reward_model(checkpoint, info)
    if not (checkpoint / TOKENIZER).is_file():
        raise TinyLMError(f"teacher {checkpoint} has no {TOKENIZER}: its tokenizer must be checked against the "
                          "student's")
    size, free = (checkpoint / WEIGHTS).stat().st_size, available_memory()
    if free is not None and size > free:
        raise TinyLMError(f"teacher {checkpoint} needs {size / 2**30:.1f} GiB for its weights but this machine has "
                          f"{free / 2**30:.1f} GiB free: distil from a smaller teacher, or cache its logits "
                          "(--logit-cache) on a machine that holds it")
    return checkpoint


def check_same_tokenizer(teacher_tokenizer: Any, student_tokenizer: Any, teacher: str, student: str) -> None:
    """The divergence compares distributions over the same ids: refuse two tokenizers, naming both ("the teacher
    PATH", "--base PATH", "the data DIR")."""
    if teacher_tokenizer.fingerprint != student_tokenizer.fingerprint:
        raise TinyLMError(f"{teacher} ({teacher_tokenizer.name}, {teacher_tokenizer.n_vocab:,} tokens) and {student} "
                          f"({student_tokenizer.name}, {student_tokenizer.n_vocab:,} tokens) split text differently: "
                          "distillation needs one tokenizer")


def teacher_tokenizer(checkpoint: Path) -> Any:
    return load_tokenizer(checkpoint / TOKENIZER)


def load_teacher(checkpoint: Path, device: torch.device) -> nn.Module:
    """The teacher on `device`, eval mode, every parameter frozen (its forwards run under no_grad as well)."""
    model, _, _ = load_model(checkpoint, device=device)
    model.eval()
    for parameter in model.parameters():
        parameter.requires_grad_(False)
    return model


def teacher_summary(checkpoint: Path, model: nn.Module) -> str:
    """A header line: which teacher, how big."""
    n = sum(p.numel() for p in model.parameters())
    stage = read_checkpoint_config(checkpoint).get("stage", "a checkpoint")
    return f"teacher: {checkpoint} ({stage}, {n:,} parameters, frozen, in eval mode)"
