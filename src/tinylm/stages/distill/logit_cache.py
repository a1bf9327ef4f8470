"""The teacher's logits cached to disk: offline distillation pays the teacher's forward once, not every epoch.

    DIR/cache.json        what it holds: the teacher's fingerprint, the tokenizer's, the rows', K
    DIR/train.safetensors ids [rows, seq_len, K] int32 and logprobs [rows, seq_len, K] float32
    DIR/dev.safetensors   the same for the held-out rows (the held-out divergence needs them too)

For each row and position it keeps the teacher's K most likely next tokens and their log-probabilities
(of the full softmax at temperature 1); the divergence then runs on those K, renormalised
(`divergences.py`). A student reads the cache by the `row` column of its batches and never loads the
teacher. A cache is only ever used for what it was written from: another teacher, another tokenizer or
other rows is refused in one line, before any step. It is written into a hidden folder and renamed into
place, so a crash leaves no half cache.
"""

from __future__ import annotations

import hashlib
import json
import os
import shutil
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch
from safetensors.torch import load_file, save_file

from tinylm.errors import TinyLMError
from tinylm.stages.distill.divergences import TeacherTopK, top_k_of

FORMAT = "tinylm-logit-cache"
VERSION = 1
INFO = "cache.json"
TOKENIZER = "tokenizer.json"


def rows_fingerprint(rows: dict[str, torch.Tensor]) -> str:
    """Of the ids and targets: the same rows in the same order give the same fingerprint."""
    digest = hashlib.blake2b(digest_size=16)
    for name in ("idx", "targets"):
        digest.update(rows[name].to(torch.int64).contiguous().numpy().tobytes())
    return digest.hexdigest()


@dataclass(frozen=True)
class CacheKey:
    """What a cache must have been written from to be read for this run."""

    teacher: str | None  # the teacher's fingerprint; None: no --teacher given (the cache names its own)
    tokenizer: str
    train_rows: str
    dev_rows: str
    seq_len: int


def write_cache(folder: Path, key: CacheKey, k: int, splits: dict[str, dict[str, torch.Tensor]],
                teacher_logits: Callable[[dict[str, torch.Tensor]], torch.Tensor], batch_size: int,
                teacher_path: str, extra: dict[str, Any], tokenizer: Any) -> None:
    """Run the teacher over every row of every split, keep its top-k, and write the cache atomically, with the
    tokenizer (a student that reads the cache needs no teacher to know its ids) and `extra` facts (its data)."""
    if key.teacher is None:
        raise TinyLMError(f"--logit-cache {folder} holds no cache yet: give --teacher to write it")
    tmp = folder.with_name(f".tmp-{folder.name}-{os.getpid()}")
    shutil.rmtree(tmp, ignore_errors=True)
    tmp.mkdir(parents=True)
    for split, rows in splits.items():
        if not rows:
            continue
        n = len(rows["idx"])
        ids = torch.zeros(n, key.seq_len, k, dtype=torch.int32)
        logprobs = torch.zeros(n, key.seq_len, k, dtype=torch.float32)
        for first in range(0, n, batch_size):
            batch = {name: t[first:first + batch_size] for name, t in rows.items()}
            top = top_k_of(teacher_logits(batch), k)
            ids[first:first + batch_size] = top.ids.to(torch.int32).cpu()
            logprobs[first:first + batch_size] = top.logprobs.float().cpu()
        save_file({"ids": ids, "logprobs": logprobs}, str(tmp / f"{split}.safetensors"))
    info = {"format": FORMAT, "version": VERSION, "teacher": key.teacher, "teacher_path": teacher_path,
            "tokenizer": key.tokenizer, "train_rows": key.train_rows, "dev_rows": key.dev_rows,
            "seq_len": key.seq_len, "top_k": k, **extra}
    tokenizer.save(tmp / TOKENIZER)
    (tmp / INFO).write_text(json.dumps(info, indent=2) + "\n", encoding="utf-8")
    if folder.exists():
        shutil.rmtree(folder)  # an empty folder the user made for it (checked by the caller)
    tmp.rename(folder)


class LogitCache:
    """A written cache, checked against this run's key, read by row numbers."""

    def __init__(self, folder: Path, key: CacheKey) -> None:
        self.folder = folder
        info = read_info(folder)
        checked = {"teacher": key.teacher, "tokenizer": key.tokenizer, "train_rows": key.train_rows,
                   "dev_rows": key.dev_rows}
        problems = [f"another {name.replace('_', ' ')} ({str(info.get(name))[:12]}... vs {mine[:12]}...)"
                    for name, mine in checked.items() if mine is not None and info.get(name) != mine]
        if info.get("seq_len") != key.seq_len:
            problems.append(f"rows of {info.get('seq_len')} tokens, not {key.seq_len}")
        if problems:
            raise TinyLMError(f"--logit-cache {folder} was written for another run ({'; '.join(problems)}): "
                              "give another folder to write a new cache")
        self.info = info
        self.top_k = int(info["top_k"])
        self.splits: dict[str, dict[str, torch.Tensor]] = {}
        for split in ("train", "dev"):
            file = folder / f"{split}.safetensors"
            if file.is_file():
                self.splits[split] = load_file(str(file))

    def lookup(self, split: str, rows: torch.Tensor, mask: torch.Tensor | None = None) -> TeacherTopK:
        """The teacher's top-k at every position of rows [B] (at the masked positions only, when given)."""
        part = self.splits[split]
        ids, logprobs = part["ids"][rows.cpu()].long(), part["logprobs"][rows.cpu()]
        if mask is not None:
            ids, logprobs = ids[mask.cpu()], logprobs[mask.cpu()]
        device = mask.device if mask is not None else rows.device
        return TeacherTopK(ids.to(device), logprobs.to(device))


def read_info(folder: Path) -> dict[str, Any]:
    try:
        info = json.loads((folder / INFO).read_text(encoding="utf-8"))
    except (OSError, json.JSONDecodeError) as error:
        raise TinyLMError(f"--logit-cache {folder}: cannot read {INFO} ({error})") from None
    if not isinstance(info, dict) or info.get("format") != FORMAT or info.get("version") != VERSION:
        raise TinyLMError(f"--logit-cache {folder} is not a tinylm logit cache (version {VERSION})")
    return info


def has_cache(folder: Path) -> bool:
    """True when the folder holds a cache; an absent or empty folder is where one will be written; anything else
    is refused (a typo must not overwrite another folder)."""
    if (folder / INFO).is_file():
        return True
    if folder.exists() and (not folder.is_dir() or any(folder.iterdir())):
        raise TinyLMError(f"--logit-cache {folder} exists and is not a logit cache: give an empty or new folder")
    return False
