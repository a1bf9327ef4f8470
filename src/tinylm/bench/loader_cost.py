"""What feeding the model costs: the data loader's time per batch as a fraction of a training step.

The loader reads random windows of a memory-mapped token shard and turns them into tensors. If
that took a noticeable share of a step, the model would wait for data; the fraction says whether
it does. The shard here is a temporary file of random token ids read through `numpy.memmap`, as
prepared shards are, so the measurement needs no prepared corpus.
"""

from __future__ import annotations

import tempfile
from pathlib import Path
from typing import Any

import numpy as np
import torch

from tinylm.bench.timing import Measurement, rate
from tinylm.data.loader import BatchLoader


def write_random_shard(folder: Path, n_tokens: int, vocab_size: int, seed: int = 0) -> Path:
    """train.bin of uniformly random token ids, in the dtype `prepare` would pick for this vocabulary."""
    dtype = np.uint16 if vocab_size < 1 << 16 else np.uint32
    tokens = np.random.default_rng(seed).integers(0, vocab_size, n_tokens, dtype=np.int64).astype(dtype)
    path = folder / "train.bin"
    tokens.tofile(path)
    return path


def loader_cost(batch_size: int, seq_len: int, vocab_size: int, repeats: int,
                step_tokens_per_s: float | None, batches_per_repeat: int = 50) -> dict[str, Any]:
    """Loader tokens/s and its fraction of a step (given the training rate measured just before)."""
    with tempfile.TemporaryDirectory() as folder:
        path = write_random_shard(Path(folder), max(1 << 20, 4 * batch_size * (seq_len + 1)), vocab_size)
        tokens_on_disk = np.memmap(path, dtype=np.uint16 if vocab_size < 1 << 16 else np.uint32, mode="r")
        loader = BatchLoader(tokens_on_disk, batch_size, seq_len, seed=0, device="cpu")
        loader.next_batch()  # warm-up: page in the map
        tokens = batch_size * seq_len
        measured = Measurement([rate(loader.next_batch, tokens, torch.device("cpu"), batches_per_repeat)
                                for _ in range(repeats)])
        del loader, tokens_on_disk  # release the memory map before the folder goes
    fraction = None if not step_tokens_per_s else step_tokens_per_s / measured.median
    return {"loader_tokens_per_s": measured.median, "loader": measured.to_dict(), "loader_fraction_of_step": fraction}
