"""Writing a data folder so that an interrupted or failed prepare never leaves a file that loads.

Every output file is first written under a hidden temporary name in the destination folder (same
file system, so the final rename is atomic). Only when all of them are complete does `commit`
replace the old files: it first deletes the old sidecars, so that from then until the last rename
the folder is visibly incomplete (`check_data_dir` refuses a `.bin` without its sidecar), then
renames the shards and tokenizer, and the sidecars last. A failure before `commit` removes the
temporary files and leaves any earlier dataset exactly as it was.
"""

from __future__ import annotations

import contextlib
import hashlib
import os
from collections.abc import Iterable
from pathlib import Path
from typing import BinaryIO

import numpy as np


class Staging:
    """Temporary files for one prepare in `folder`, renamed into place by `commit` or removed by `discard`."""

    def __init__(self, folder: Path) -> None:
        self.folder = folder
        self.created_folder = not folder.exists()
        folder.mkdir(parents=True, exist_ok=True)
        self.temps: dict[str, Path] = {}

    def path(self, name: str) -> Path:
        """The temporary path that will become `folder/name`."""
        if name not in self.temps:
            self.temps[name] = self.folder / f".{name}.tmp-{os.getpid()}"
        return self.temps[name]

    def commit(self, sidecars: Iterable[str]) -> None:
        """Invalidate the old dataset, then rename every temporary file into place, sidecars last."""
        sidecars = list(sidecars)
        for name in sidecars:
            (self.folder / name).unlink(missing_ok=True)
        for name in [n for n in self.temps if n not in sidecars] + sidecars:
            os.replace(self.temps[name], self.folder / name)
        self.temps.clear()

    def discard(self) -> None:
        """Remove what this prepare wrote (and the folder, if it made it and it is empty)."""
        for temp in self.temps.values():
            temp.unlink(missing_ok=True)
        self.temps.clear()
        if self.created_folder:
            with contextlib.suppress(OSError):
                self.folder.rmdir()


class ShardWriter:
    """Appends documents' ids (EOT after each) to a temporary `.bin`, counting as it goes."""

    def __init__(self, path: Path, dtype: np.dtype, eot_id: int) -> None:
        self.path = path
        self.dtype = np.dtype(dtype)
        self.eot = np.array([eot_id], dtype=self.dtype)
        self.tokens = self.documents = self.bytes = 0
        self._sha = hashlib.sha256()
        self._file: BinaryIO = path.open("wb")

    def add(self, docs: list[np.ndarray], n_bytes: int) -> None:
        """Append a batch of documents (their ids) whose text was `n_bytes` of UTF-8."""
        if not docs:
            return
        pieces: list[np.ndarray] = []
        for ids in docs:
            pieces += (ids, self.eot)
        self._write(np.concatenate(pieces).astype(self.dtype, copy=False), len(docs), n_bytes)

    def add_stream(self, tokens: np.ndarray, n_bytes: int) -> None:
        """Append ids that already hold their EOTs (part of a written shard); each EOT ends a document."""
        tokens = tokens.astype(self.dtype, copy=False)
        self._write(tokens, int(np.count_nonzero(tokens == self.eot[0])), n_bytes)

    def _write(self, data: np.ndarray, documents: int, n_bytes: int) -> None:
        raw = data.tobytes()
        self._file.write(raw)
        self._sha.update(raw)
        self.tokens += int(data.size)
        self.documents += documents
        self.bytes += n_bytes

    @property
    def sha256(self) -> str:
        return self._sha.hexdigest()

    def close(self) -> None:
        self._file.close()
