"""Packing: several conversations in one training row, each computed exactly as if it were alone.

SFT conversations are short and vary in length; one per row pads every row to the longest and
spends most of the compute on padding. Packing fills each row with whole conversations
(best-fit-decreasing: longest first, each into the row it leaves the least room in), and keeps them
apart:

- `positions` restart at 0 in each conversation (RoPE angles / the learned position table see
  the same positions as for the conversation alone);
- `segments` give each conversation its own id, and attention lets a query see only keys of its
  own segment (models/modern/mask.py), on top of causality and any sliding window;
- `targets` are -100 (ignored) where the mask says "do not learn" (prompts, system text), at each
  conversation's last slot (its next token belongs to another conversation) and on padding.

So the summed loss of a packed batch is the sum of the conversations' separate summed losses,
and dividing by the number of target tokens gives their token-weighted mean: packing is a pure
speed-up (tests/test_packing.py proves it to 1e-6, gradients too).

An example of L tokens fills L - 1 slots (inputs ids[:-1], targets ids[1:]). One longer than
seq_len + 1 tokens is truncated from the right: its first seq_len + 1 tokens are kept and its
tail is dropped; `count_truncated` says how many were. SFT never hands packing such an example:
a conversation longer than a row is first split at its turn boundaries (`turn_windows.py`).
"""

from __future__ import annotations

import bisect
from collections.abc import Sequence
from dataclasses import dataclass

import torch

IGNORE = -100  # target of a slot that carries no loss (PyTorch's and Hugging Face's convention)
PAD_SEGMENT = -1  # segment id of padding slots: they see only other padding, never a conversation

Example = tuple[Sequence[int], Sequence[int]]  # (token ids, mask: 1 = learn this token)


@dataclass
class PackedRow:
    """One training row of seq_len slots."""

    inputs: list[int]
    targets: list[int]
    positions: list[int]
    segments: list[int]


def _clip(example: Example, seq_len: int) -> tuple[list[int], list[int]]:
    ids, mask = list(example[0]), list(example[1])
    if len(ids) != len(mask):
        raise ValueError(f"an example has {len(ids)} ids but {len(mask)} mask values")
    return ids[: seq_len + 1], mask[: seq_len + 1]


def count_truncated(examples: Sequence[Example], seq_len: int) -> int:
    """How many examples are longer than a row holds (seq_len + 1 tokens) and lose their tail."""
    return sum(len(ids) > seq_len + 1 for ids, _ in examples)


def _fill(row: PackedRow, ids: list[int], mask: list[int], segment: int) -> None:
    row.inputs += ids[:-1]
    row.targets += [token if learn else IGNORE for token, learn in zip(ids[1:], mask[1:], strict=True)]
    row.positions += range(len(ids) - 1)
    row.segments += [segment] * (len(ids) - 1)


def _pad(row: PackedRow, seq_len: int, pad_id: int) -> PackedRow:
    missing = seq_len - len(row.inputs)
    row.inputs += [pad_id] * missing
    row.targets += [IGNORE] * missing
    row.positions += [0] * missing
    row.segments += [PAD_SEGMENT] * missing
    return row


def pack(examples: Sequence[Example], seq_len: int, pad_id: int = 0) -> list[PackedRow]:
    """Rows of seq_len slots holding whole examples, best-fit-decreasing (deterministic: ties keep input order)."""
    if seq_len < 1:
        raise ValueError(f"seq_len={seq_len}: must be >= 1")
    clipped = [_clip(example, seq_len) for example in examples]
    order = sorted(range(len(clipped)), key=lambda i: -len(clipped[i][0]))
    rows: list[PackedRow] = []
    free: list[tuple[int, int]] = []  # (free slots, row number), sorted: the best fit is found by bisection
    for i in order:
        ids, mask = clipped[i]
        if len(ids) < 2:  # a single token predicts nothing
            continue
        need = len(ids) - 1
        at = bisect.bisect_left(free, (need, -1))
        if at < len(free):
            room, number = free.pop(at)
        else:
            room, number = seq_len, len(rows)
            rows.append(PackedRow([], [], [], []))
        row = rows[number]
        _fill(row, ids, mask, segment=row.segments[-1] + 1 if row.segments else 0)
        bisect.insort(free, (room - need, number))
    return [_pad(row, seq_len, pad_id) for row in rows]


def unpacked(examples: Sequence[Example], seq_len: int, pad_id: int = 0) -> list[PackedRow]:
    """One example per row, right-padded: the no-packing path (same fields, so one training step serves both).

    Right padding is never seen by a causal query, so these rows could also run without positions
    and segments; they are filled anyway.
    """
    rows = []
    for example in examples:
        ids, mask = _clip(example, seq_len)
        if len(ids) < 2:
            continue
        row = PackedRow([], [], [], [])
        _fill(row, ids, mask, segment=0)
        rows.append(_pad(row, seq_len, pad_id))
    return rows


def padding_waste(rows: Sequence[PackedRow]) -> float:
    """Share of all row slots that hold padding (0.0 for no rows)."""
    slots = sum(len(row.segments) for row in rows)
    padding = sum(row.segments.count(PAD_SEGMENT) for row in rows)
    return padding / slots if slots else 0.0


def as_tensors(rows: Sequence[PackedRow], device: torch.device | str = "cpu") -> dict[str, torch.Tensor]:
    """The rows as [B, seq_len] int64 tensors named as `forward` takes them: idx, targets, positions, segments."""
    def stack(name: str) -> torch.Tensor:
        return torch.tensor([getattr(row, name) for row in rows], dtype=torch.long, device=device)

    return {"idx": stack("inputs"), "targets": stack("targets"), "positions": stack("positions"),
            "segments": stack("segments")}
