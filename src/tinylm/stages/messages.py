"""A chat conversation as post-training reads it: a checked list of {"role", "content"} messages.

SFT learns from whole conversations and preference pairs carry them as prompts and sides, so both
check message lists here: known roles, text contents, and an assistant turn to learn from. A
content is a string, or OpenAI's list of parts ([{"type": "text", "text": ...}, ...]) whose text
parts are joined by a newline, as the server joins them (`chat_format.TEXT_PART_SEPARATOR`); any other part (an
image, audio) is refused, since a text model cannot learn from it and dropping it would change
what the message says.
"""

from __future__ import annotations

from typing import Any

from tinylm.stages.row_error import RowError
from tinylm.tokenizer.chat_format import TEXT_PART_SEPARATOR

Message = dict[str, str]
ROLES = ("system", "user", "assistant")


def _text(content: Any, role: str) -> str:
    """A message's content as text: a string, or the joined text of a list of content parts."""
    if isinstance(content, str):
        return content
    if not isinstance(content, list):
        raise RowError(f"the content of a {role} message must be a string or a list of text parts")
    texts = []
    for part in content:
        kind = part.get("type") if isinstance(part, dict) else None
        if kind != "text":
            what = f"of type {kind!r}" if kind is not None else "without a type"
            raise RowError(f"a {role} message has a content part {what}: tinylm reads text parts only")
        if not isinstance(part.get("text"), str):
            raise RowError(f"a text part of a {role} message has no string 'text'")
        texts.append(part["text"])
    return TEXT_PART_SEPARATOR.join(texts)


def checked_messages(messages: Any) -> list[Message]:
    """`messages` as a list of plain {"role", "content"} dicts; RowError says what is wrong."""
    if not isinstance(messages, list) or not messages:
        raise RowError("expected a non-empty list of messages")
    out = []
    for message in messages:
        if not isinstance(message, dict):
            raise RowError(f"a message must be an object, got {type(message).__name__}")
        role = message.get("role")
        if role not in ROLES:
            raise RowError(f"unknown role {role!r} (allowed: {', '.join(ROLES)})")
        out.append({"role": role, "content": _text(message.get("content"), role)})
    if not any(m["role"] == "assistant" for m in out):
        raise RowError("no assistant message to learn from")
    return out
