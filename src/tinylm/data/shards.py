"""Token shards on disk: a flat array of ids plus a JSON sidecar, and the checks before training.

A prepared data folder holds `train.bin`/`train.json`, `dev.bin`/`dev.json` and `tokenizer.json`.
Each `.bin` is the split's documents' ids back to back, an EOT after every document, as `uint16`
when every id fits (vocabularies up to 65536: half the disk and page-cache of `uint32`) and
`uint32` otherwise; no header, so `numpy.memmap` reads it in place with zero copies. The sidecar
says how to read it (`dtype`, `tokens`) and what it is (`tokenizer`, `vocab_size`, `eot_id`,
`corpus`, `split`, `documents`, `bytes` of UTF-8 text for bits-per-byte, `config_hash`, `sha256`,
`dev_split`: "hash", or "tail" when the dev split is the end of the token stream, see `tail_split.py`).

`check_data_dir` runs before a model is built, so a missing, half-written or mismatched folder is a
one-line error instead of a crash (or an out-of-range embedding index) minutes later.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import numpy as np

from tinylm.errors import TinyLMError

SPLITS = ("train", "dev")
TOKENIZER_FILE = "tokenizer.json"
REQUIRED = ("tokenizer", "dtype", "tokens", "documents", "bytes", "corpus", "split", "config_hash",
            "vocab_size", "eot_id")
DTYPES = ("uint16", "uint32")


def shard_dtype(n_vocab: int) -> np.dtype:
    """The smallest unsigned dtype that holds every id below `n_vocab`."""
    return np.dtype(np.uint16) if n_vocab <= 1 << 16 else np.dtype(np.uint32)


def sidecar_path(path: str | Path, split: str | None = None) -> Path:
    """`dir/split.json`, the `.json` next to a `.bin`, or a `.json` itself."""
    path = Path(path)
    if split is not None:
        return path / f"{split}.json"
    return path.with_suffix(".json") if path.suffix == ".bin" else path


def read_sidecar(path: str | Path, split: str | None = None) -> dict[str, Any]:
    """A shard's sidecar (from a data folder + split, a `.bin` or a `.json` path), checked for its keys."""
    file = sidecar_path(path, split)
    try:
        data = json.loads(file.read_text(encoding="utf-8"))
    except FileNotFoundError:
        raise TinyLMError(f"shard sidecar not found: {file}") from None
    except (OSError, UnicodeDecodeError, json.JSONDecodeError) as exc:
        raise TinyLMError(f"cannot read shard sidecar {file}: {exc}") from None
    if not isinstance(data, dict):
        raise TinyLMError(f"{file} is not a shard sidecar (not a JSON object)")
    missing = [key for key in REQUIRED if key not in data]
    if missing:
        raise TinyLMError(f"{file} is not a shard sidecar (missing {', '.join(missing)})")
    if data["dtype"] not in DTYPES:
        raise TinyLMError(f"{file}: unknown dtype {data['dtype']!r} (expected {' or '.join(DTYPES)})")
    return data


def _check_size(bin_path: Path, sidecar: dict[str, Any]) -> None:
    if not bin_path.is_file():
        raise TinyLMError(f"shard not found: {bin_path}")
    expected = int(sidecar["tokens"]) * np.dtype(sidecar["dtype"]).itemsize
    actual = bin_path.stat().st_size
    if actual != expected:
        raise TinyLMError(f"{bin_path} holds {actual} bytes but its sidecar says {sidecar['tokens']} "
                          f"{sidecar['dtype']} tokens ({expected} bytes): rerun `tinylm prepare --force`")


def open_shard(path: str | Path) -> tuple[np.ndarray, dict[str, Any]]:
    """(read-only memmap of a `.bin`, its sidecar), after checking the file size against the sidecar."""
    bin_path = Path(path)
    sidecar = read_sidecar(bin_path)
    _check_size(bin_path, sidecar)
    dtype = np.dtype(sidecar["dtype"])
    if int(sidecar["tokens"]) == 0:
        return np.zeros(0, dtype=dtype), sidecar
    return np.memmap(bin_path, dtype=dtype, mode="r", shape=(int(sidecar["tokens"]),)), sidecar


def check_data_dir(path: str | Path, vocab_size: int | None = None) -> dict[str, dict[str, Any]]:
    """The sidecars {"train": ..., "dev": ...} of a complete data folder whose ids fit `vocab_size`."""
    folder = Path(path)
    if not folder.exists():
        raise TinyLMError(f"data folder not found: {folder} (create it with `tinylm prepare --out {folder}`)")
    if not folder.is_dir():
        raise TinyLMError(f"{folder} is not a folder (a prepared data folder holds train.bin, dev.bin, ...)")
    names = [f"{split}{ext}" for split in SPLITS for ext in (".bin", ".json")] + [TOKENIZER_FILE]
    missing = [name for name in names if not (folder / name).is_file()]
    if missing:
        raise TinyLMError(f"{folder} is not a complete prepared data folder (missing {', '.join(missing)}): "
                          "run `tinylm prepare`")
    sidecars = {split: read_sidecar(folder, split) for split in SPLITS}
    for split, sidecar in sidecars.items():
        _check_size(folder / f"{split}.bin", sidecar)
    if len({s["config_hash"] for s in sidecars.values()}) != 1:
        raise TinyLMError(f"{folder} mixes files of two prepares (train and dev differ): "
                          "rerun `tinylm prepare --force`")
    needed = int(sidecars["train"]["vocab_size"])
    if vocab_size is not None and needed > vocab_size:
        raise TinyLMError(f"{folder} was tokenized with a {needed}-token vocabulary but the model has "
                          f"vocab_size={vocab_size}: use a model with vocab_size >= {needed} or prepare "
                          "with that vocab size")
    return sidecars
