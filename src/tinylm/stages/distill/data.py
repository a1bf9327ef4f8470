"""What the student learns on: fixed rows of text or of rendered conversations, each with its row number.

Distillation reads any data the other stages read. A prepared data folder (the teacher's pretraining
data by default) becomes rows of consecutive windows of its training shard, every token trained; a
task, a JSONL file or hf:NAME becomes conversations rendered by the chat format and packed, only the
assistant's tokens trained (as SFT does). The rows are fixed, not drawn at random offsets as
pretraining draws them, because a logit cache (`logit_cache.py`) stores the teacher's answer for each
row: the `row` column says which one a batch holds. The held-out rows are the dev shard's first windows
(the same ones pretraining's dev bits per byte reads) or the task's held-out problems.

On-policy batches start from prompts: the user turns of the training conversations, or the first half of
a text row, which the student then continues itself.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import torch

from tinylm.data.loader import iter_sequential, load_tokens
from tinylm.data.packing import as_tensors, pack
from tinylm.data.shards import read_sidecar
from tinylm.errors import TinyLMError
from tinylm.stages.from_base import held_out
from tinylm.stages.sft.data import load_conversations  # the one reader of conversation data (a shared reader)
from tinylm.tasks.registry import get_task
from tinylm.tasks.task import Example, Task
from tinylm.tokenizer.chat_format import ChatFormat

Rows = dict[str, torch.Tensor]  # idx, targets [, positions, segments], row: one tensor per column, one row each


class RowPrefixes(Sequence[list[int]]):
    """The first `length` tokens of each text row, as on-policy prompts, made when asked (not a list of them all)."""

    def __init__(self, rows: torch.Tensor, length: int) -> None:
        self.rows, self.length = rows, length

    def __len__(self) -> int:
        return len(self.rows)

    def __getitem__(self, index: int) -> list[int]:  # type: ignore[override]
        return self.rows[index, :self.length].tolist()


@dataclass
class DistillData:
    """The rows to learn on, the held-out rows, the on-policy prompts and what the header says of them."""

    kind: str  # "text" or "conversations"
    train: Rows
    dev: Rows
    prompts: Sequence[list[int]]
    report: list[str] = field(default_factory=list)
    dev_tokens: int = 0  # text: the dev shard's tokens and bytes, for bits per byte
    dev_bytes: int = 0
    task: Task | None = None
    eval_problems: list[Example] = field(default_factory=list)


def is_data_folder(spec: str) -> bool:
    return Path(spec).is_dir() and (Path(spec) / "train.bin").is_file()


def numbered(rows: Rows) -> Rows:
    """The rows with their row numbers, the key a logit cache is read by."""
    n = len(next(iter(rows.values())))
    return {**rows, "row": torch.arange(n)}


def text_rows(folder: Path, seq_len: int, limit: int | None, batch_size: int, eval_batches: int) -> DistillData:
    """Consecutive windows of seq_len + 1 tokens of the training shard (overlapping by one: every token is a
    target once), and the dev shard's first eval_batches x batch_size windows."""
    tokens, _ = load_tokens(folder / "train.bin", "train")
    n = (len(tokens) - 1) // seq_len
    if limit is not None:
        n = min(n, limit)
    if n < 1:
        raise TinyLMError(f"{folder}/train.bin holds {len(tokens):,} tokens: not one row of {seq_len + 1}")
    starts = np.arange(n, dtype=np.int64) * seq_len
    window = torch.from_numpy(np.asarray(tokens[starts[:, None] + np.arange(seq_len + 1)], dtype=np.int64))
    train = numbered({"idx": window[:, :-1].contiguous(), "targets": window[:, 1:].contiguous()})
    dev_batches = list(iter_sequential(folder / "dev.bin", batch_size, seq_len, max_batches=eval_batches))
    if not dev_batches:
        raise TinyLMError(f"{folder}/dev.bin holds no row of {seq_len + 1} tokens to evaluate on")
    dev = numbered({"idx": torch.cat([x for x, _ in dev_batches]).long(),
                    "targets": torch.cat([y for _, y in dev_batches]).long()})
    sidecar = read_sidecar(folder, "dev")
    prompts = RowPrefixes(train["idx"], seq_len // 2)
    report = [f"data: {folder}: {n:,} rows of {seq_len} tokens ({n * seq_len:,} tokens), every token trained; "
              f"held out: {len(dev['idx']):,} rows of dev.bin"]
    return DistillData("text", train, dev, prompts, report, int(sidecar["tokens"]), int(sidecar["bytes"]))


def conversation_rows(spec: str, chat: ChatFormat, seq_len: int, cfg: Any,
                      answers: list[list[dict[str, Any]]] | None = None) -> DistillData:
    """A task's or a file's conversations, rendered and packed; `answers` (sequence-level) replaces the training
    conversations by the teacher's."""
    task, eval_problems = None, []
    if spec.startswith("builtin:"):
        task = get_task(spec)
        train = load_conversations(spec, "train", seed=cfg.seed, limit=cfg.train_examples).conversations
        eval_problems = task.examples("test", cfg.eval_examples, cfg.seed)
        dev = [list(map(dict, e.messages)) for e in eval_problems]
    else:
        loaded = load_conversations(spec, "train", seed=cfg.seed)
        train = [c for c in loaded.conversations if not held_out(c, cfg.dev_fraction)]
        dev = [c for c in loaded.conversations if held_out(c, cfg.dev_fraction)]
        if not train:
            raise TinyLMError(f"{spec}: every conversation fell into the held-out share; lower --dev-fraction")
    prompts = [chat.prompt_ids(c[:_last_assistant(c)]) for c in train]
    if answers is not None:
        train = answers
    train_rows, train_line = _packed(train, chat, seq_len, "train", spec)
    dev_rows, dev_line = _packed(dev, chat, seq_len, "held out", spec) if dev else ({}, "held out: none")
    room = seq_len - cfg.max_new_tokens
    prompts = [p for p in prompts if len(p) <= room]
    return DistillData("conversations", train_rows, dev_rows, prompts, [train_line, dev_line], task=task,
                       eval_problems=eval_problems)


def _last_assistant(messages: list[dict[str, Any]]) -> int:
    return max(i for i, m in enumerate(messages) if m["role"] == "assistant")


def _packed(conversations: list[list[dict[str, Any]]], chat: ChatFormat, seq_len: int, split: str, spec: str
            ) -> tuple[Rows, str]:
    """Rendered conversations packed into rows; one longer than a row is left out and counted, never cut."""
    examples, long = [], 0
    for messages in conversations:
        rendered = chat.render(messages)
        if rendered.n_learn and len(rendered.ids) <= seq_len + 1:
            examples.append((rendered.ids, rendered.mask))
        elif rendered.n_learn:
            long += 1
    if not examples:
        raise TinyLMError(f"{spec}: no {split} conversation fits a row of {seq_len} tokens with an answer to learn")
    rows = numbered(as_tensors(pack(examples, seq_len, chat.eot_id)))
    line = f"{split}: {len(examples):,} conversations -> {len(rows['idx']):,} packed rows of {seq_len}"
    return rows, line + (f"; {long:,} longer than a row left out" if long else "")
