"""Batches of fixed rows (packed conversations, preference pairs): seeded epochs, resumable, rank-aware.

Post-training data is a finite list of rows, read in a fresh random order every epoch. The rows
form one endless stream, epoch 0, epoch 1, ..., and the position is how many of them the run has
consumed, P. The next global batch takes rows P ... P+B*W-1 (B rows per rank, W ranks), and rank r
takes its B of them. The order of epoch e is `default_rng([seed, e])`, so the whole position is one
integer: any number of ranks sees the same global batches, which is what makes `torchrun` with 2
processes equal 1 process with twice the batch. Because the position counts rows, not steps, a run
resumed with another number of ranks or another batch size goes on from the next row, with none
seen twice or skipped.
"""

from __future__ import annotations

from typing import Any

import numpy as np
import torch

from tinylm.errors import TinyLMError

STATE_VERSION = 2  # 1 counted steps: a resume with another global batch would skip or repeat rows


class RowLoader:
    def __init__(self, rows: dict[str, torch.Tensor], batch_size: int, seed: int = 0, rank: int = 0,
                 world_size: int = 1, device: str | torch.device = "cpu") -> None:
        sizes = {len(t) for t in rows.values()}
        if len(sizes) != 1 or not next(iter(sizes)):
            raise TinyLMError("no rows to train on")
        self.rows = rows
        self.n_rows = next(iter(sizes))
        self.batch_size, self.seed, self.rank, self.world_size = batch_size, seed, rank, world_size
        self.device = torch.device(device)
        self.position = 0  # rows consumed by every rank together
        self._orders: dict[int, np.ndarray] = {}

    def _order(self, epoch: int) -> np.ndarray:
        if epoch not in self._orders:
            self._orders = {epoch: np.random.default_rng([self.seed, epoch]).permutation(self.n_rows)}
        return self._orders[epoch]

    def indices(self, position: int) -> np.ndarray:
        """This rank's row numbers in the global batch that starts at stream position `position`."""
        first = position + self.rank * self.batch_size
        positions = np.arange(first, first + self.batch_size)
        epochs, offsets = np.divmod(positions, self.n_rows)
        return np.array([self._order(int(e))[o] for e, o in zip(epochs, offsets)], dtype=np.int64)

    @property
    def epoch(self) -> float:
        """Epochs of data seen so far (global), for the log."""
        return self.position / self.n_rows

    def next_batch(self) -> dict[str, torch.Tensor]:
        index = torch.from_numpy(self.indices(self.position))
        self.position += self.world_size * self.batch_size
        return {name: t[index].to(self.device, non_blocking=True) for name, t in self.rows.items()}

    def state_dict(self) -> dict[str, Any]:
        return {"version": STATE_VERSION, "seed": self.seed, "position": self.position, "rows": self.n_rows}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        if state.get("version") == 1 and "rows" in state:  # steps of this run's global batch, as version 1 meant
            state = {**state, "version": 2, "position": int(state["step"]) * self.world_size * self.batch_size}
        if state.get("version") != STATE_VERSION or "rows" not in state:
            raise TinyLMError("the checkpoint's data position is not a post-training row position: "
                              "resume it with the stage that wrote it")
        if int(state["rows"]) != self.n_rows:
            raise TinyLMError(f"the saved data position is for {state['rows']} rows but the data gives {self.n_rows}: "
                              "resume with the run's own data and options")
        self.seed, self.position = int(state["seed"]), int(state["position"])
