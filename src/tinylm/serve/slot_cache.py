"""A KV cache whose rows are independent requests of different lengths: the memory behind continuous batching.

The model's attention writes the new keys/values of every row at the same column (`length`) and
attends over columns [0, length). So rows are kept right-aligned: row i holds its tokens in columns
[start_i, length) and marks the columns before start_i as padding. A request joins by copying the
cache of its (separately computed) prompt into the columns just before `length`; a row that leaves
is overwritten by the last row, so the live rows are always 0..rows-1 and every decode step works on
views, never on copies. Each row's tokens stay contiguous, so slot distances are token distances and
sliding-window attention stays exact.

    length       the shared end column (what the model calls the cache length)
    start[i]     where row i's context begins; its position for the next token is length - start[i]

When the end column reaches the capacity, everything is shifted left by the smallest start (no row
is longer than the model's window, so a capacity of twice the window leaves room for a window of
steps between shifts). A prompt longer than every row so far shifts the rows right instead.
"""

from __future__ import annotations

import torch

from tinylm.models.modern.kv_cache import KVCache


class RightAlignedRows:
    """The rows' bookkeeping (join, leave, shift) over slot-major buffers [max_rows, capacity, ...] and their
    padding mask [max_rows, capacity]; a buffer laid out otherwise takes part through a transposed view."""

    def __init__(self, buffers: list[torch.Tensor], valid: torch.Tensor, capacity: int) -> None:
        self.buffers, self.valid, self.capacity = buffers, valid, capacity
        self.max_rows = valid.shape[0]
        self.rows = 0
        self.length = 0
        self.start = torch.zeros(self.max_rows, dtype=torch.long, device=valid.device)
        self.starts: list[int] = []  # the same, on the Python side: read every step without a device sync
        self.columns = torch.arange(capacity, device=valid.device)

    def shared_start(self) -> int | None:
        """The column every row begins at, when they all begin at one (they joined together), else None."""
        starts = self.starts
        if not starts or min(starts) != max(starts):
            return None
        return starts[0]

    def positions(self) -> torch.Tensor:
        """[rows, 1]: each row's position for the token written at column `length`."""
        return (self.length - self.start[: self.rows])[:, None]

    def make_room(self, t: int) -> None:
        """Shift the rows left so that t more columns fit (raises if a row would outgrow the capacity)."""
        if self.length + t <= self.capacity:
            return
        shift = min(self.starts) if self.starts else self.length
        if self.length - shift + t > self.capacity:
            raise ValueError(f"a row of {self.length - shift} tokens + {t} does not fit capacity {self.capacity}")
        self._shift(-shift)

    def join(self, sources: list[torch.Tensor], n_tokens: int) -> int:
        """Copy a prefilled prompt (one source [1, >= n_tokens, ...] per buffer, in order) into a new row ending
        at column `length`; its row index."""
        if self.rows == self.max_rows:
            raise ValueError("every slot is taken")
        if self.rows == 0:
            self.length = 0
        if n_tokens > self.length:
            self._shift(n_tokens - self.length)
        row, lo = self.rows, self.length - n_tokens
        for buffer, source in zip(self.buffers, sources, strict=True):
            buffer[row, lo : self.length] = source[0, :n_tokens]
        self.start[row] = lo
        self.starts.append(lo)
        self.valid[row, : self.length] = self.columns[: self.length] >= lo
        self.rows += 1
        return row

    def leave(self, row: int) -> None:
        """Free `row`: the last row moves into it (the caller renumbers its request the same way)."""
        last = self.rows - 1
        if row != last:
            for buffer in self.buffers:
                buffer[row, : self.length] = buffer[last, : self.length]
            self.valid[row, : self.length] = self.valid[last, : self.length]
            self.start[row] = self.start[last]
            self.starts[row] = self.starts[last]
        self.starts.pop()
        self.rows = last

    def _shift(self, by: int) -> None:
        """Move every row's columns right (by > 0) or left (by < 0) and renumber starts and length."""
        n, end = self.rows, self.length
        src = slice(max(0, -by), end)
        dst = slice(max(0, by), end + by)
        for buffer in self.buffers:
            buffer[:n, dst] = buffer[:n, src].clone()
        self.start[:n] += by
        self.starts = [s + by for s in self.starts]
        self.length = end + by
        self.valid[:n, : self.length] = self.columns[None, : self.length] >= self.start[:n, None]


class SlotCache(RightAlignedRows):
    """`KVCache`'s interface (length, mark_valid, write, advance) over the first `rows` of a wider buffer."""

    def __init__(self, model: torch.nn.Module, max_rows: int, capacity: int) -> None:
        self.storage: KVCache = model.new_cache(max_rows, capacity)
        buffers = [buffer for layer in self.storage.buffers for buffer in layer.values()]
        super().__init__(buffers, self.storage.valid, capacity)

    # ---- what the model calls during forward_hidden --------------------------------------------------
    def mark_valid(self, valid: torch.Tensor | None, t: int) -> torch.Tensor:
        if valid is not None:
            raise ValueError("rows of a SlotCache are never padded inside: pass valid=None")
        self.storage.valid[: self.rows, self.length : self.length + t] = True
        return self.storage.valid[: self.rows, : self.length + t]

    def write(self, layer: int, name: str, value: torch.Tensor) -> torch.Tensor:
        t = value.shape[1]
        buffer = self.storage.buffers[layer][name]
        buffer[: self.rows, self.length : self.length + t] = value
        return buffer[: self.rows, : self.length + t]

    def advance(self, t: int) -> None:
        self.length += t

    def join_cache(self, prompt_cache: KVCache, n_tokens: int) -> int:
        """Copy a prefilled single-row cache into a new row (`join`); its row index."""
        return self.join([buffer for layer in prompt_cache.buffers for buffer in layer.values()], n_tokens)
