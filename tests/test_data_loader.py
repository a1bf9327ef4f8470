"""The batch loader: shifted windows, seeded, exact resume, rank-aware; sequential evaluation windows."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest
import torch

from tinylm.data.loader import BatchLoader, iter_sequential
from tinylm.errors import TinyLMError


def make_shard(folder: Path, tokens: np.ndarray, split: str = "train") -> Path:
    """A .bin + sidecar written the way prepare writes them."""
    folder.mkdir(parents=True, exist_ok=True)
    path = folder / f"{split}.bin"
    tokens.tofile(path)
    sidecar = {"tokenizer": "test", "dtype": tokens.dtype.name, "tokens": int(tokens.size), "documents": 1,
               "bytes": int(tokens.size), "corpus": "test", "split": split, "config_hash": "x",
               "vocab_size": 65536, "eot_id": 0}
    path.with_suffix(".json").write_text(json.dumps(sidecar))
    return path


@pytest.fixture
def shard(tmp_path: Path) -> Path:
    # token i is i % 60000: a window's content reveals its offset
    return make_shard(tmp_path, (np.arange(100_000) % 60_000).astype(np.uint16))


def test_windows_are_shifted_pairs(shard: Path) -> None:
    loader = BatchLoader(shard, batch_size=4, seq_len=16, seed=0)
    x, y = loader.next_batch()
    assert x.shape == y.shape == (4, 16) and x.dtype == y.dtype == torch.int64
    assert x.is_contiguous() and y.is_contiguous()
    assert torch.equal(x[:, 1:], y[:, :-1])
    tokens = np.fromfile(shard, dtype=np.uint16)
    for row_x, row_y in zip(x, y):
        start = int(row_x[0])
        assert np.array_equal(row_x.numpy(), tokens[start:start + 16])
        assert np.array_equal(row_y.numpy(), tokens[start + 1:start + 17])


def test_offsets_cover_the_whole_valid_range(tmp_path: Path) -> None:
    path = make_shard(tmp_path, np.arange(10, dtype=np.uint16))
    loader = BatchLoader(path, batch_size=64, seq_len=7, seed=3)
    starts = {int(x[0]) for _ in range(20) for x in loader.next_batch()[0]}
    assert starts == {0, 1, 2}  # 10 tokens hold windows of 7+1 at offsets 0..2 only


def test_seeded_and_different_per_seed(shard: Path) -> None:
    a = [BatchLoader(shard, 8, 32, seed=1).next_batch()[0] for _ in range(2)]
    b = BatchLoader(shard, 8, 32, seed=2).next_batch()[0]
    assert torch.equal(a[0], a[1]) and not torch.equal(a[0], b)
    loader = BatchLoader(shard, 8, 32, seed=1)
    assert not torch.equal(loader.next_batch()[0], loader.next_batch()[0])


def test_state_restore_is_exact_after_json(shard: Path) -> None:
    loader = BatchLoader(shard, 4, 32, seed=7)
    for _ in range(5):
        loader.next_batch()
    state = json.loads(json.dumps(loader.state_dict()))
    expected = [loader.next_batch() for _ in range(3)]
    resumed = BatchLoader(shard, 4, 32, seed=0)  # the seed comes from the state
    resumed.load_state_dict(state)
    for (x, y), (ex, ey) in zip((resumed.next_batch() for _ in range(3)), expected):
        assert torch.equal(x, ex) and torch.equal(y, ey)
    assert resumed.state_dict() == loader.state_dict()


def test_state_from_another_shard_is_refused(shard: Path, tmp_path: Path) -> None:
    state = BatchLoader(shard, 4, 32).state_dict()
    other = BatchLoader(make_shard(tmp_path / "o", np.arange(500, dtype=np.uint16)), 4, 32)
    with pytest.raises(TinyLMError, match="shard of 100000 tokens"):
        other.load_state_dict(state)
    with pytest.raises(TinyLMError, match="version"):
        other.load_state_dict({**state, "version": 99})


def test_ranks_split_the_single_process_batch(shard: Path) -> None:
    single = BatchLoader(shard, batch_size=6, seq_len=16, seed=5)
    ranks = [BatchLoader(shard, batch_size=3, seq_len=16, seed=5, rank=r, world_size=2) for r in range(2)]
    for _ in range(4):
        x, y = single.next_batch()
        parts = [loader.next_batch() for loader in ranks]
        assert torch.equal(torch.cat([p[0] for p in parts]), x)
        assert torch.equal(torch.cat([p[1] for p in parts]), y)
        assert not torch.equal(parts[0][0], parts[1][0])
    state = ranks[1].state_dict()
    assert state == ranks[0].state_dict()  # one state for every rank


def test_in_memory_array_and_data_folder(tmp_path: Path) -> None:
    tokens = np.arange(1000, dtype=np.uint32)
    make_shard(tmp_path, tokens.astype(np.uint16))
    from_array = BatchLoader(tokens, 2, 8, seed=4).next_batch()
    from_folder = BatchLoader(tmp_path, 2, 8, seed=4).next_batch()
    assert torch.equal(from_array[0], from_folder[0])


def test_too_short_shard_and_bad_arguments(tmp_path: Path) -> None:
    path = make_shard(tmp_path, np.arange(16, dtype=np.uint16))
    BatchLoader(path, 1, 15)  # 16 tokens hold exactly one window of 15 + 1
    with pytest.raises(TinyLMError, match="fewer than one window of seq_len \\+ 1 = 17"):
        BatchLoader(path, 1, 16)
    with pytest.raises(TinyLMError, match="fewer than one window"):
        list(iter_sequential(path, 1, 16))
    with pytest.raises(ValueError, match="batch_size"):
        BatchLoader(path, 0, 4)
    with pytest.raises(ValueError, match="rank"):
        BatchLoader(path, 1, 4, rank=2, world_size=2)
    with pytest.raises(TinyLMError, match="sidecar not found"):
        BatchLoader(tmp_path / "nothing.bin", 1, 4)


def test_sequential_windows_in_order(tmp_path: Path) -> None:
    tokens = np.arange(103, dtype=np.uint16)
    path = make_shard(tmp_path, tokens, split="dev")
    batches = list(iter_sequential(path, batch_size=4, seq_len=10))
    xs = torch.cat([x for x, _ in batches])
    ys = torch.cat([y for _, y in batches])
    assert [x.shape[0] for x, _ in batches] == [4, 4, 2]  # (103 - 1) // 10 = 10 windows
    assert torch.equal(xs, torch.arange(100).view(10, 10))
    assert torch.equal(ys, torch.arange(1, 101).view(10, 10))
    assert len(list(iter_sequential(path, 4, 10, max_batches=2))) == 2
    assert torch.equal(next(iter_sequential(tmp_path, 4, 10))[0], batches[0][0])  # a folder means dev.bin
