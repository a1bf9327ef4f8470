"""Shard files and the data-folder check that runs before a model is built."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest

from tinylm.data.shards import check_data_dir, open_shard, read_sidecar, shard_dtype
from tinylm.data.staging import ShardWriter, Staging
from tinylm.errors import TinyLMError


def write_dataset(folder: Path, vocab_size: int = 4096, train_tokens: int = 50, dev_tokens: int = 20) -> Path:
    folder.mkdir(parents=True, exist_ok=True)
    for split, n in (("train", train_tokens), ("dev", dev_tokens)):
        np.arange(n, dtype=np.uint16).tofile(folder / f"{split}.bin")
        sidecar = {"tokenizer": "bpe4096", "dtype": "uint16", "tokens": n, "documents": 1, "bytes": n * 3,
                   "corpus": "test", "split": split, "config_hash": "abc", "vocab_size": vocab_size,
                   "eot_id": 0}
        (folder / f"{split}.json").write_text(json.dumps(sidecar))
    (folder / "tokenizer.json").write_text("{}")
    return folder


def test_complete_folder_passes(tmp_path: Path) -> None:
    sidecars = check_data_dir(write_dataset(tmp_path / "d"), vocab_size=4096)
    assert sidecars["train"]["tokens"] == 50 and sidecars["dev"]["tokens"] == 20
    assert read_sidecar(tmp_path / "d", "dev") == read_sidecar(tmp_path / "d" / "dev.bin") == sidecars["dev"]
    assert read_sidecar(tmp_path / "d" / "dev.json") == sidecars["dev"]


def test_missing_incomplete_and_not_a_folder(tmp_path: Path) -> None:
    with pytest.raises(TinyLMError, match="data folder not found"):
        check_data_dir(tmp_path / "nope")
    (tmp_path / "file").write_text("x")
    with pytest.raises(TinyLMError, match="is not a folder"):
        check_data_dir(tmp_path / "file")
    folder = write_dataset(tmp_path / "d")
    (folder / "dev.json").unlink()
    with pytest.raises(TinyLMError, match=r"missing dev.json"):
        check_data_dir(folder)


def test_truncated_shard(tmp_path: Path) -> None:
    folder = write_dataset(tmp_path / "d")
    with (folder / "train.bin").open("r+b") as handle:
        handle.truncate(60)
    with pytest.raises(TinyLMError, match="holds 60 bytes but its sidecar says 50 uint16 tokens"):
        check_data_dir(folder)
    with pytest.raises(TinyLMError, match="holds 60 bytes"):
        open_shard(folder / "train.bin")


def test_mixed_prepares_and_bad_sidecars(tmp_path: Path) -> None:
    folder = write_dataset(tmp_path / "d")
    dev = json.loads((folder / "dev.json").read_text())
    (folder / "dev.json").write_text(json.dumps({**dev, "config_hash": "other"}))
    with pytest.raises(TinyLMError, match="mixes files of two prepares"):
        check_data_dir(folder)
    (folder / "dev.json").write_text(json.dumps({"dtype": "uint16"}))
    with pytest.raises(TinyLMError, match="missing tokenizer, tokens"):
        check_data_dir(folder)
    (folder / "dev.json").write_text(json.dumps({**dev, "dtype": "float32"}))
    with pytest.raises(TinyLMError, match="unknown dtype 'float32'"):
        check_data_dir(folder)
    (folder / "dev.json").write_text("[1, 2")
    with pytest.raises(TinyLMError, match="cannot read shard sidecar"):
        check_data_dir(folder)


def test_vocab_larger_than_the_model(tmp_path: Path) -> None:
    folder = write_dataset(tmp_path / "d", vocab_size=50304)
    check_data_dir(folder, vocab_size=50304)
    check_data_dir(folder)
    with pytest.raises(TinyLMError, match="50304-token vocabulary but the model has vocab_size=4096"):
        check_data_dir(folder, vocab_size=4096)


def test_dtype_choice_and_uint32_round_trip(tmp_path: Path) -> None:
    assert shard_dtype(4096) == np.uint16 and shard_dtype(65536) == np.uint16
    assert shard_dtype(65537) == np.uint32 and shard_dtype(200_000) == np.uint32
    staging = Staging(tmp_path / "out")
    writer = ShardWriter(staging.path("train.bin"), shard_dtype(100_000), eot_id=99_999)
    writer.add([np.array([70_000, 5], dtype=np.uint32), np.array([], dtype=np.uint32)], n_bytes=7)
    writer.close()
    assert (writer.tokens, writer.documents, writer.bytes) == (4, 2, 7)
    data = np.fromfile(staging.path("train.bin"), dtype=np.uint32)
    assert data.tolist() == [70_000, 5, 99_999, 99_999]
    staging.discard()
    assert not (tmp_path / "out").exists()  # the folder it created, now empty, is gone too
