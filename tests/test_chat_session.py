"""A chat session keeps the conversation within the window: oldest exchanges go first, the system prompt stays."""

from __future__ import annotations

import functools

import pytest

from tinylm.errors import TinyLMError
from tinylm.inference.chat_session import ChatSession
from tinylm.tokenizer.chat_format import ChatFormat
from tinylm.tokenizer.train import train_bpe


@functools.lru_cache(maxsize=1)
def chat() -> ChatFormat:
    text = ["hello there, how are you? fine thanks. what is two plus two? four."] * 50
    return ChatFormat.from_tokenizer(train_bpe(text, vocab_size=300))


def test_the_prompt_is_the_conversation_ending_with_the_assistant_header() -> None:
    session = ChatSession(chat(), window=200, reply_room=20, system="be brief")
    ids, dropped = session.prompt("hello")
    assert dropped == 0
    assert ids == chat().prompt_ids([{"role": "system", "content": "be brief"}, {"role": "user", "content": "hello"}])
    session.add_reply("hi")
    ids, _ = session.prompt("what is two plus two?")
    assert ids[-1] == chat().role_ids["assistant"] and len(session.turns) == 3


def test_oldest_exchanges_are_dropped_first_and_the_system_prompt_stays() -> None:
    session = ChatSession(chat(), window=60, reply_room=10, system="be brief")
    total_dropped = 0
    for i in range(12):
        ids, dropped = session.prompt(f"hello there {i}, how are you?")
        total_dropped += dropped
        assert len(ids) <= 60 - 10
        session.add_reply("fine thanks")
    assert total_dropped > 0
    assert session.turns[-1]["content"] == "fine thanks" and session.turns[-2]["content"].startswith("hello there 11")
    assert session.turns[0]["role"] == "user"  # whole exchanges went, the first kept turn is a user's
    assert chat().tokenizer.decode(session.prompt("x")[0]).count("be brief") == 1


def test_a_message_that_cannot_fit_is_one_clear_error_and_is_not_kept() -> None:
    session = ChatSession(chat(), window=30, reply_room=10)
    with pytest.raises(TinyLMError, match="no room for a reply"):
        session.prompt("hello there, how are you? " * 10)
    assert session.turns == []


def test_when_only_the_current_exchange_is_left_the_reply_gets_the_room_that_is_left() -> None:
    session = ChatSession(chat(), window=40, reply_room=30)
    ids, dropped = session.prompt("hello there, how are you?")
    assert dropped == 0 and 40 - len(ids) < 30  # less than the reply room is left: the reply takes what is left
    assert session.room(ids) == 40 - len(ids) >= 1
    short, _ = ChatSession(chat(), window=200, reply_room=30).prompt("hi")
    assert ChatSession(chat(), window=200, reply_room=30).room(short) == 30
