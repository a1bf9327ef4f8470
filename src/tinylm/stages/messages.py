"""A chat conversation as post-training reads it: a checked list of {"role", "content"} messages.

SFT learns from whole conversations and preference pairs carry them as prompts and sides, so both
check message lists here: known roles, string contents, and an assistant turn to learn from.
"""

from __future__ import annotations

from typing import Any

from tinylm.stages.spec_rows import RowError

Message = dict[str, str]
ROLES = ("system", "user", "assistant")


def checked_messages(messages: Any) -> list[Message]:
    """`messages` as a list of plain {"role", "content"} dicts; RowError says what is wrong."""
    if not isinstance(messages, list) or not messages:
        raise RowError("expected a non-empty list of messages")
    out = []
    for message in messages:
        if not isinstance(message, dict):
            raise RowError(f"a message must be an object, got {type(message).__name__}")
        role, content = message.get("role"), message.get("content")
        if role not in ROLES:
            raise RowError(f"unknown role {role!r} (allowed: {', '.join(ROLES)})")
        if not isinstance(content, str):
            raise RowError(f"the content of a {role} message must be a string")
        out.append({"role": role, "content": content})
    if not any(m["role"] == "assistant" for m in out):
        raise RowError("no assistant message to learn from")
    return out
