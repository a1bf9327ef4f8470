"""Batches for training and evaluation, read straight from a memory-mapped token shard.

Training (`BatchLoader`) samples windows at random offsets: `x` is `seq_len` tokens and `y` the same
window shifted by one (the next token at every position). Windows may cross document boundaries;
the EOT between documents tells the model a new one starts. Offsets come from a generator seeded by
(seed, step), so batch k is a pure function of k: the loader's state is just the step counter, a
resume continues with exactly the batches it would have drawn, and no RNG state has to be pickled.

With `long_documents_eot`, the offsets are drawn only where a whole window fits inside one document
(document_windows.py): the rows of a context extension.

Distributed training draws `world_size * batch_size` offsets per step from that one generator on
every rank, and rank r takes rows r*B..(r+1)*B-1. The ranks together see exactly the batch one
process with batch size world_size*B would see, so changing the number of GPUs at a fixed global
batch does not change the data.

The hot path is vectorised: one (B, seq_len+1) index array, one fancy-indexing read from the memmap
(only the touched pages are read), one cast to int64. On CUDA the batch is copied into pinned memory
and sent with `non_blocking=True`, so the copy overlaps with the previous step's GPU work.

Evaluation (`iter_sequential`) walks the shard from the start in non-overlapping windows, so every
evaluation sees the same text in the same order.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import numpy as np
import torch

from tinylm.data.document_windows import DOCUMENT_ENDS_NEED_LONG_DOCUMENTS, DocumentWindows
from tinylm.data.shards import open_shard
from tinylm.errors import TinyLMError

Batch = tuple[torch.Tensor, torch.Tensor]
STATE_VERSION = 1


def load_tokens(source: str | Path | np.ndarray, default_split: str) -> tuple[np.ndarray, str]:
    """(tokens, name for messages) from a `.bin` path, a data folder (its `default_split`) or an array."""
    if isinstance(source, np.ndarray):
        if source.ndim != 1 or not np.issubdtype(source.dtype, np.integer):
            raise ValueError("a token array must be one-dimensional and of an integer dtype")
        return source, "token array"
    path = Path(source)
    if path.is_dir():
        path = path / f"{default_split}.bin"
    tokens, _ = open_shard(path)
    return tokens, str(path)


def _check_length(tokens: np.ndarray, seq_len: int, where: str) -> None:
    if len(tokens) < seq_len + 1:
        raise TinyLMError(f"{where} holds {len(tokens)} tokens, fewer than one window of seq_len + 1 = "
                          f"{seq_len + 1}: use a larger corpus or a shorter context length")


def _positive(**values: int) -> None:
    for name, value in values.items():
        if isinstance(value, bool) or not isinstance(value, int) or value < 1:
            raise ValueError(f"{name} must be a positive integer, got {value!r}")


def to_device(x: np.ndarray, y: np.ndarray, device: torch.device) -> Batch:
    """int64 numpy windows -> tensors on `device`; via pinned memory and async copies on CUDA."""
    xt, yt = torch.from_numpy(x), torch.from_numpy(y)
    if device.type == "cuda":
        return xt.pin_memory().to(device, non_blocking=True), yt.pin_memory().to(device, non_blocking=True)
    if device.type != "cpu":
        return xt.to(device), yt.to(device)
    return xt, yt


def windows(tokens: np.ndarray, starts: np.ndarray, seq_len: int) -> tuple[np.ndarray, np.ndarray]:
    """(x, y) int64 arrays of shape [len(starts), seq_len] for windows beginning at `starts`."""
    index = starts[:, None] + np.arange(seq_len + 1, dtype=np.int64)
    block = tokens[index].astype(np.int64)
    return np.ascontiguousarray(block[:, :-1]), np.ascontiguousarray(block[:, 1:])


class BatchLoader:
    """Random (x, y) windows from a token shard: seeded, resumable, rank-aware."""

    def __init__(self, path_or_bin: str | Path | np.ndarray, batch_size: int, seq_len: int, seed: int = 0,
                 rank: int = 0, world_size: int = 1, device: str | torch.device = "cpu",
                 long_documents_eot: int | None = None, document_ends: bool = False) -> None:
        _positive(batch_size=batch_size, seq_len=seq_len, world_size=world_size)
        if not 0 <= rank < world_size:
            raise ValueError(f"rank {rank} is outside [0, world_size={world_size})")
        if isinstance(seed, bool) or not isinstance(seed, int) or seed < 0:
            raise ValueError(f"seed must be a non-negative integer, got {seed!r}")
        self.tokens, self.where = load_tokens(path_or_bin, "train")
        _check_length(self.tokens, seq_len, self.where)
        self.batch_size, self.seq_len, self.seed = batch_size, seq_len, seed
        self.rank, self.world_size = rank, world_size
        self.device = torch.device(device)
        self.step = 0
        # given the end-of-text id, rows come only from documents that hold a whole row (document_windows.py)
        self.documents = None if long_documents_eot is None else DocumentWindows(self.tokens, long_documents_eot)
        if document_ends and self.documents is None:
            raise TinyLMError(DOCUMENT_ENDS_NEED_LONG_DOCUMENTS)
        self.document_ends = document_ends
        if self.documents is not None and not self.documents.longer_than(seq_len):
            raise TinyLMError(f"--long-documents: no document of {self.where} holds a row of {seq_len + 1} tokens "
                              f"(the longest has {int(self.documents.lengths.max())})")

    def offsets(self, step: int, rows: int | None = None, seq_len: int | None = None) -> np.ndarray:
        """This rank's window starts at `step`: its rows of the world_size * rows drawn for everyone (rows of
        `seq_len` tokens; by default the loader's batch and length)."""
        rows, seq_len = rows or self.batch_size, seq_len or self.seq_len
        rng = np.random.default_rng([self.seed, step])
        if self.documents is not None and self.document_ends:
            starts = self.documents.sample_ends(rng, self.world_size * rows, seq_len)
        elif self.documents is not None:
            starts = self.documents.sample(rng, self.world_size * rows, seq_len)
        else:
            starts = rng.integers(0, len(self.tokens) - seq_len, size=self.world_size * rows, dtype=np.int64)
        return starts[self.rank * rows:(self.rank + 1) * rows]

    def next_batch(self, rows: int | None = None, seq_len: int | None = None) -> Batch:
        """The next (x, y), each int64 [rows, seq_len] on the loader's device (default: [batch_size, seq_len];
        a batch-size ramp asks for fewer rows, a sequence-length warmup for shorter ones)."""
        seq_len = seq_len or self.seq_len
        x, y = windows(self.tokens, self.offsets(self.step, rows, seq_len), seq_len)
        self.step += 1
        return to_device(x, y, self.device)

    def __iter__(self) -> Iterator[Batch]:
        while True:
            yield self.next_batch()

    def state_dict(self) -> dict[str, Any]:
        """Plain JSON-serialisable state; the same on every rank."""
        return {"version": STATE_VERSION, "seed": self.seed, "step": self.step, "tokens": len(self.tokens),
                "batch_size": self.batch_size, "seq_len": self.seq_len, "world_size": self.world_size}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        """Continue from `state`: the following batches are exactly those the saving loader would have drawn.

        The batch size, window length or number of ranks may change (the step counter still picks
        fresh offsets), but the shard must be the same size, or this would be another dataset.
        """
        if state.get("version") != STATE_VERSION:
            raise TinyLMError(f"loader state has version {state.get('version')!r}, expected {STATE_VERSION}")
        if int(state["tokens"]) != len(self.tokens):
            raise TinyLMError(f"the saved data position is for a shard of {state['tokens']} tokens but "
                              f"{self.where} holds {len(self.tokens)}: resume with the run's own data")
        self.seed, self.step = int(state["seed"]), int(state["step"])


def iter_sequential(path: str | Path | np.ndarray, batch_size: int, seq_len: int,
                    max_batches: int | None = None, device: str | torch.device = "cpu") -> Iterator[Batch]:
    """Non-overlapping windows from the start of a shard (a data folder means its dev split), in order.

    Yields batches of `batch_size` windows (the last may be smaller), at most `max_batches` of them.
    Window i covers tokens [i*seq_len, (i+1)*seq_len]; the tail shorter than a window is left out.
    """
    _positive(batch_size=batch_size, seq_len=seq_len)
    tokens, where = load_tokens(path, "dev")
    _check_length(tokens, seq_len, where)
    n_windows = (len(tokens) - 1) // seq_len
    target = torch.device(device)
    for number, first in enumerate(range(0, n_windows, batch_size)):
        if max_batches is not None and number >= max_batches:
            return
        starts = np.arange(first, min(first + batch_size, n_windows), dtype=np.int64) * seq_len
        x, y = windows(tokens, starts, seq_len)
        yield to_device(x, y, target)
