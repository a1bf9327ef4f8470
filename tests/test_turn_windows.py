"""A conversation longer than a row is split at turn boundaries, so every assistant turn that fits a row is
trained on: each piece starts with the system prompt (when there is one) and a whole turn, holds whole turns,
and learns assistant tokens only; a turn longer than a row is cut and the loss is counted."""

from __future__ import annotations

import pytest

from tinylm.data.packing import IGNORE, pack
from tinylm.data.turn_windows import conversation_windows, turn_windows
from tinylm.tokenizer import train_bpe
from tinylm.tokenizer.chat_format import ChatFormat

SEQ_LEN = 120  # two exchanges beside the system prompt
CORPUS = ["Hello there! How are you today? I am fine, thank you. What is two plus three? Five.\n" * 20]
SYSTEM = {"role": "system", "content": "Answer briefly."}


@pytest.fixture(scope="module")
def chat() -> ChatFormat:
    return ChatFormat.from_tokenizer(train_bpe(CORPUS, vocab_size=300))


def long_conversation(turns: int) -> list[dict[str, str]]:
    messages = [SYSTEM]
    for n in range(turns):
        messages += [{"role": "user", "content": f"What is {n} plus three? " * 2},
                     {"role": "assistant", "content": f"It is {n + 3}, thank you. " * 2}]
    return messages


def learned(ids: list[int], mask: list[int]) -> list[int]:
    return [token for token, learn in zip(ids, mask) if learn]


def test_a_long_conversation_becomes_several_rows_that_train_every_assistant_turn(chat: ChatFormat) -> None:
    messages = long_conversation(8)
    whole = chat.render(messages)
    assert len(whole.ids) > 3 * (SEQ_LEN + 1)  # the old first-window cut kept under a third of it
    split = conversation_windows(chat, messages, SEQ_LEN)
    assert len(split.examples) >= 3 and split.cut == split.dropped_tokens == split.left_out == 0
    head = chat.render([SYSTEM]).ids
    starts = {chat.role_ids["user"], chat.role_ids["assistant"]}
    for ids, mask in split.examples:
        assert len(ids) <= SEQ_LEN + 1
        assert ids[:len(head)] == head and ids[len(head)] in starts  # the system prompt, then a turn boundary
        assert ids[-1] == chat.end_id  # whole turns only
        assert mask == assistant_mask(chat, ids)  # the loss on assistant tokens only
    assert [t for ids, mask in split.examples for t in learned(ids, mask)] == learned(whole.ids, whole.mask)
    rows = pack(split.examples, SEQ_LEN)
    targets = sum(sum(t != IGNORE for t in row.targets) for row in rows)
    assert len(rows) >= 3 and targets == sum(whole.mask)  # every assistant token is a target exactly once


def assistant_mask(chat: ChatFormat, ids: list[int]) -> list[int]:
    """The mask read off the ids: 1 from after each <|assistant|> up to and including the <|end|> closing it."""
    mask, inside = [], False
    for token in ids:
        mask.append(int(inside))
        if token == chat.role_ids["assistant"]:
            inside = True
        elif token == chat.end_id:
            inside = False
    return mask


def test_a_conversation_that_fits_is_left_whole(chat: ChatFormat) -> None:
    messages = long_conversation(1)
    rendered = chat.render(messages)
    assert conversation_windows(chat, messages, len(rendered.ids) - 1).examples == [(rendered.ids, rendered.mask)]
    assert len(conversation_windows(chat, messages, len(rendered.ids) - 2).examples) == 1  # the answer, alone


def test_a_turn_longer_than_a_row_is_cut_and_counted() -> None:
    head = ([0], [0])
    question, short = ([1, 5, 5, 2], [0, 0, 0, 0]), ([3, 6, 2], [0, 1, 1])
    long = ([3, *range(10, 40), 2], [0, *[1] * 31])  # 32 tokens, 31 to learn
    split = turn_windows(head, [question, short, question, long, question, short], seq_len=16)
    assert [len(ids) for ids, _ in split.examples] == [8, 17, 8]
    assert split.examples[1][0] == [0, *question[0], 3, *range(10, 21)]  # its question, then its head
    assert split.cut == 1 and split.dropped_tokens == 31 - 11
    assert split.left_out == 0


def test_a_question_too_long_to_sit_beside_its_answer_is_left_out_and_counted() -> None:
    head = ([0], [0])
    long_question, answer = ([1, *range(10, 30), 2], [0] * 22), ([3, 6, 2], [0, 1, 1])
    split = turn_windows(head, [long_question, answer], seq_len=16)
    assert split.examples == [([0, 3, 6, 2], [0, 0, 1, 1])] and split.left_out == 1 and split.cut == 0
