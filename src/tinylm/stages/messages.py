"""A chat conversation as post-training reads it: a checked list of {"role", "content"} messages.

With tools (a row's `tools`, TRL's column), assistant messages keep their `tool_calls` and reasoning
and `tool` turns their results; a bad call or a stray tool turn is a row error like any other, so the
file:line of it is what the user reads. The declared tools ride on the system message ("tools"),
which `ChatFormat.render` reads, so a conversation stays one list whatever it holds.

SFT learns from whole conversations and preference pairs carry them as prompts and sides, so both
check message lists here: known roles, text contents, and an assistant turn to learn from. A
content is a string, or OpenAI's list of parts ([{"type": "text", "text": ...}, ...]) whose text
parts are joined by a newline, as the server joins them (`chat_format.TEXT_PART_SEPARATOR`); any other part (an
image, audio) is refused, since a text model cannot learn from it and dropping it would change
what the message says.
"""

from __future__ import annotations

import json
from typing import Any

from tinylm.data.rows.error import RowError
from tinylm.tokenizer.chat_format import AGENT_ROLES, TEXT_PART_SEPARATOR
from tinylm.tokenizer.tool_calls import call_parts, conversation_problem, reasoning_of, tools_problem

Message = dict[str, Any]
ROLES = AGENT_ROLES


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


def _assistant_extras(message: dict[str, Any]) -> dict[str, Any]:
    """An assistant message's reasoning (as `reasoning_content`) and tool calls, checked one by one."""
    extras: dict[str, Any] = {}
    reasoning = reasoning_of(message)
    if not isinstance(reasoning, str):
        raise RowError("an assistant message's reasoning must be a string")
    if reasoning:
        extras["reasoning_content"] = reasoning
    calls = message.get("tool_calls")
    if calls:
        if not isinstance(calls, list):
            raise RowError("tool_calls must be a list of calls")
        checked = []
        for call in calls:
            try:
                name, arguments = call_parts(call)
            except ValueError as error:
                raise RowError(str(error)) from None
            checked.append({"type": "function", "function": {"name": name, "arguments": arguments}})
        extras["tool_calls"] = checked
    return extras


def checked_tools(tools: Any) -> list[dict[str, Any]]:
    """A row's tool declarations: OpenAI's function shape, a bare {"name", "parameters"} (wrapped into it,
    as LLaMA-Factory writes them), or either as JSON text (how a `datasets` column holds them)."""
    if isinstance(tools, str):
        try:
            tools = json.loads(tools) if tools.strip() else []
        except json.JSONDecodeError as error:
            raise RowError(f"'tools' is text but not JSON ({error.msg})") from None
    if isinstance(tools, list):
        tools = [{"type": "function", "function": tool} if isinstance(tool, dict) and "function" not in tool
                 and isinstance(tool.get("name"), str) else tool for tool in tools]
    problem = tools_problem(tools)
    if problem:
        raise RowError(problem)
    return tools


def checked_messages(messages: Any, tools: Any = None) -> list[Message]:
    """`messages` as a list of plain message dicts (with `tools` on the system message); RowError says what is wrong.

    Beyond role and text content, an assistant message keeps its reasoning and tool calls, and a tool
    turn its result; the tool use must hold together: calls name declared tools with JSON arguments,
    and a tool turn answers a call (`tool_calls.conversation_problem`).
    """
    if not isinstance(messages, list) or not messages:
        raise RowError("expected a non-empty list of messages")
    out: list[Message] = []
    for message in messages:
        if not isinstance(message, dict):
            raise RowError(f"a message must be an object, got {type(message).__name__}")
        role = message.get("role")
        if role not in ROLES:
            raise RowError(f"unknown role {role!r} (allowed: {', '.join(ROLES)})")
        content = message.get("content")
        if content is None and role == "assistant" and message.get("tool_calls"):
            content = ""  # OpenAI writes content null beside tool calls
        checked: Message = {"role": role, "content": _text(content, role)}
        if role == "assistant":
            checked.update(_assistant_extras(message))
        elif message.get("tool_calls") or reasoning_of(message):
            raise RowError(f"a {role} message has tool calls or reasoning: only an assistant message does")
        out.append(checked)
    declared = checked_tools(tools) if tools is not None else []
    problem = conversation_problem(out, declared)
    if problem:
        raise RowError(problem)
    if declared:
        if out[0]["role"] != "system":
            out.insert(0, {"role": "system", "content": ""})
        out[0]["tools"] = declared
    if not any(m["role"] == "assistant" for m in out):
        raise RowError("no assistant message to learn from")
    return out
