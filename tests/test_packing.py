"""Packing is a pure speed-up: a packed row computes each conversation exactly as it would alone.

The reference is the plain computation we trust: every example run by itself, unpadded, through the
same model; the packed loss (sum over target tokens / their count) must equal the token-weighted
mean of those separate losses to 1e-6, with equal gradients.
"""

from __future__ import annotations

import random

import pytest
import torch

from model_variants import classic_config, modern_config
from tinylm.data.packing import (
    IGNORE,
    PAD_SEGMENT,
    as_tensors,
    count_truncated,
    pack,
    padding_waste,
    unpacked,
)
from tinylm.models.factory import build_model

SEQ_LEN = 32
VOCAB = 97

CONFIGS = {
    "modern_gqa": modern_config("gqa"),
    "modern_window_gqa": modern_config("window"),
    "modern_mla": modern_config("mla"),
    "classic_manual": classic_config(),
    "classic_sdpa": classic_config(attn_impl="sdpa"),
}


def random_examples(n: int, seed: int, max_len: int = SEQ_LEN + 1) -> list[tuple[list[int], list[int]]]:
    """Conversations of 3..max_len tokens; the mask learns a random suffix (an 'assistant answer')."""
    rng = random.Random(seed)
    examples = []
    for _ in range(n):
        length = rng.randint(3, max_len)
        ids = [rng.randrange(VOCAB) for _ in range(length)]
        answer_start = rng.randint(1, length - 1)
        examples.append((ids, [0] * answer_start + [1] * (length - answer_start)))
    return examples


def model_for(name: str) -> torch.nn.Module:
    torch.manual_seed(0)
    return build_model(CONFIGS[name]).double().eval()


def separate_sums(model, examples) -> tuple[torch.Tensor, int]:
    """(sum over examples of mean loss * target count, total target count), each example alone."""
    total, count = torch.zeros((), dtype=torch.float64), 0
    for ids, mask in examples:
        x = torch.tensor([ids[:-1]])
        y = torch.tensor([[t if m else IGNORE for t, m in zip(ids[1:], mask[1:])]])
        n = int((y != IGNORE).sum())
        _, loss = model(x, y)  # mean over this example's targets
        total, count = total + loss.double() * n, count + n
    return total, count


def packed_sum(model, rows) -> tuple[torch.Tensor, int]:
    batch = as_tensors(rows)
    _, loss = model(batch["idx"], batch["targets"], return_logits=False, positions=batch["positions"],
                    segments=batch["segments"], reduction="sum")
    return loss, int((batch["targets"] != IGNORE).sum())


@pytest.mark.parametrize("name", list(CONFIGS))
def test_packed_loss_equals_token_weighted_mean_of_separate_losses(name: str) -> None:
    model = model_for(name)
    examples = random_examples(12, seed=1)
    rows = pack(examples, SEQ_LEN)
    assert len(rows) < len(examples)  # several conversations really share rows
    got, n_packed = packed_sum(model, rows)
    expected, n_separate = separate_sums(model, examples)
    assert n_packed == n_separate
    assert abs(got.item() / n_packed - expected.item() / n_separate) < 1e-6


@pytest.mark.parametrize("name", ["modern_window_gqa", "classic_manual"])
def test_packed_gradients_equal_separate_gradients(name: str) -> None:
    model = model_for(name)
    examples = random_examples(8, seed=2)
    got, n = packed_sum(model, pack(examples, SEQ_LEN))
    packed_grads = torch.autograd.grad(got / n, list(model.parameters()))
    expected, n = separate_sums(model, examples)
    separate_grads = torch.autograd.grad(expected / n, list(model.parameters()))
    for a, b in zip(packed_grads, separate_grads):
        torch.testing.assert_close(a, b, atol=1e-6, rtol=1e-5)


@pytest.mark.parametrize("name", ["modern_window_gqa", "modern_mla", "classic_sdpa"])
def test_segments_confine_attention_to_one_conversation(name: str) -> None:
    model = model_for(name)
    first, second = random_examples(2, seed=3, max_len=15)
    rows = pack([first, second], SEQ_LEN)
    assert len(rows) == 1
    batch = as_tensors(rows)
    changed = batch["idx"].clone()
    other = batch["segments"][0] == batch["segments"][0, -1 - (batch["segments"][0] == PAD_SEGMENT).sum()]
    changed[0, other] = (changed[0, other] + 1) % VOCAB  # rewrite the last-placed conversation
    with torch.no_grad():
        a = model(batch["idx"], positions=batch["positions"], segments=batch["segments"])[0]
        b = model(changed, positions=batch["positions"], segments=batch["segments"])[0]
        plain = model(changed)[0]  # without segments the change leaks into later tokens
    keep = ~other
    torch.testing.assert_close(a[0, keep], b[0, keep], atol=0, rtol=0)
    assert not torch.allclose(a[0, other], b[0, other])
    later = keep & (torch.arange(SEQ_LEN) > other.nonzero().max())
    if later.any():
        assert not torch.allclose(plain[0, later], b[0, later])


def test_rows_hold_every_example_once_with_restarting_positions() -> None:
    examples = random_examples(30, seed=4)
    rows = pack(examples, SEQ_LEN)
    assert rows == pack(examples, SEQ_LEN)  # deterministic
    pieces = []
    for row in rows:
        assert len(row.inputs) == len(row.targets) == len(row.positions) == len(row.segments) == SEQ_LEN
        for segment in sorted(set(row.segments) - {PAD_SEGMENT}):
            slots = [i for i, s in enumerate(row.segments) if s == segment]
            assert slots == list(range(slots[0], slots[0] + len(slots)))  # contiguous
            assert [row.positions[i] for i in slots] == list(range(len(slots)))
            pieces.append(tuple(row.inputs[i] for i in slots))
    assert sorted(pieces) == sorted(tuple(ids[:-1]) for ids, _ in examples)


def test_targets_are_ignored_outside_the_mask_and_on_padding() -> None:
    rows = unpacked([([5, 6, 7, 8], [0, 0, 1, 1])], seq_len=6)
    assert rows[0].inputs == [5, 6, 7, 0, 0, 0]
    assert rows[0].targets == [IGNORE, 7, 8, IGNORE, IGNORE, IGNORE]
    assert rows[0].segments == [0, 0, 0, PAD_SEGMENT, PAD_SEGMENT, PAD_SEGMENT]
    assert padding_waste(rows) == pytest.approx(0.5)


def test_long_examples_keep_their_head_and_are_counted() -> None:
    long = (list(range(50)), [1] * 50)
    examples = [long, ([1, 2, 3], [0, 1, 1])]
    assert count_truncated(examples, SEQ_LEN) == 1
    rows = pack(examples, SEQ_LEN)
    assert rows[0].inputs == list(range(SEQ_LEN))
    assert rows[0].targets == list(range(1, SEQ_LEN + 1))


def test_packing_wastes_less_padding_than_one_example_per_row() -> None:
    examples = random_examples(100, seed=5, max_len=12)
    packed, plain = padding_waste(pack(examples, SEQ_LEN)), padding_waste(unpacked(examples, SEQ_LEN))
    assert packed < 0.1 < 0.5 < plain
