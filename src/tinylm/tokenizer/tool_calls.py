"""Tools, tool calls and reasoning as the chat format writes them, checked before any of it is rendered.

A conversation declares its tools in OpenAI's shape, `{"type": "function", "function": {"name",
"description", "parameters"}}`. An assistant message may carry `reasoning_content` (transformers also
reads `thinking` and `reasoning`) and `tool_calls`, each `{"type": "function", "function": {"name",
"arguments"}}` (or the bare `{"name", "arguments"}` transformers accepts). OpenAI sends the arguments as
JSON text and transformers as a dict: text is written as it is, a dict as `json.dumps(.., ensure_ascii=False)`,
which is what the exported template's `tojson` writes, so both render the same ids. A call is written

    <|call|>NAME\\nARGUMENTS<|/call|>

and the declared tools close the system turn, one JSON object a line after "Tools:" (`tools_text`).
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from typing import Any

REASONING_FIELDS = ("reasoning_content", "thinking", "reasoning")  # transformers' names for it, in its order
TOOLS_HEADER = "Tools:"


def reasoning_of(message: Mapping[str, Any]) -> str:
    """An assistant message's reasoning text ("" when it has none), read under any of transformers' names."""
    return next((message[key] for key in REASONING_FIELDS if message.get(key) is not None), "")


def tool_name(tool: object) -> str | None:
    """The name a declared tool is called by, or None when `tool` is not OpenAI's function shape."""
    function = tool.get("function") if isinstance(tool, Mapping) else None
    name = function.get("name") if isinstance(function, Mapping) else None
    return name if isinstance(name, str) and name else None


def tools_problem(tools: object) -> str | None:
    """Why `tools` is not a list of OpenAI function declarations with distinct names, or None."""
    if not isinstance(tools, Sequence) or isinstance(tools, (str, bytes)):
        return f"tools must be a list of tool declarations, got {type(tools).__name__}"
    names = [tool_name(tool) for tool in tools]
    for number, name in enumerate(names, 1):
        if name is None:
            return (f"tool {number} is not a {{'type': 'function', 'function': {{'name': ..., 'parameters': ...}}}} "
                    "declaration")
        if name in names[:number - 1]:
            return f"tool {number}: {name!r} is declared twice"
    return None


def tools_text(system: str, tools: Sequence[Mapping[str, Any]]) -> str:
    """The system turn's text with the tools declared at its end (just the system text when there are none)."""
    if not tools:
        return system
    lines = "".join("\n" + json.dumps(tool, ensure_ascii=False) for tool in tools)
    return (system + "\n\n" if system else "") + TOOLS_HEADER + lines


def call_parts(call: object) -> tuple[str, str]:
    """(name, arguments as JSON text) of a tool call; ValueError says what is wrong with it."""
    if not isinstance(call, Mapping):
        raise ValueError(f"a tool call must be an object, got {type(call).__name__}")
    function = call.get("function", call)
    if not isinstance(function, Mapping) or not isinstance(function.get("name"), str) or not function["name"]:
        raise ValueError("a tool call needs a function name ({'type': 'function', 'function': {'name': ...}})")
    name, arguments = function["name"], function.get("arguments", {})
    if isinstance(arguments, str):
        try:
            parsed = json.loads(arguments)
        except json.JSONDecodeError as error:
            raise ValueError(f"the arguments of the call to {name!r} are not JSON ({error.msg})") from None
        if not isinstance(parsed, dict):
            raise ValueError(f"the arguments of the call to {name!r} must be a JSON object")
        return name, arguments
    if not isinstance(arguments, Mapping):
        raise ValueError(f"the arguments of the call to {name!r} must be a JSON object or its text")
    return name, json.dumps(dict(arguments), ensure_ascii=False)


def call_text(call: object) -> str:
    """The text between <|call|> and <|/call|>: the tool's name, a newline, the arguments' JSON."""
    name, arguments = call_parts(call)
    return f"{name}\n{arguments}"


def conversation_problem(messages: Sequence[Mapping[str, Any]],
                         tools: Sequence[Mapping[str, Any]] | None) -> str | None:
    """What is wrong with the tool use of a conversation whose messages are otherwise well formed, or None.

    Every call names a declared tool and has JSON-object arguments, and a tool turn answers a call:
    it follows an assistant message with calls (or another tool turn), and there are no more of them
    than there were calls.
    """
    declared = {tool_name(tool) for tool in tools or ()}
    pending = 0  # calls of the last assistant message not yet answered by a tool turn
    for number, message in enumerate(messages, 1):
        role = message["role"]
        if role == "tool":
            if pending == 0:
                return f"message {number} (tool): a tool result with no tool call before it to answer"
            pending -= 1
            continue
        calls = message.get("tool_calls") or []
        if calls and role != "assistant":
            return f"message {number} ({role}): only an assistant message makes tool calls"
        if not isinstance(calls, list):
            return f"message {number}: tool_calls must be a list"
        for call in calls:
            try:
                name, _ = call_parts(call)
            except ValueError as error:
                return f"message {number}: {error}"
            if name not in declared:
                known = ", ".join(sorted(declared)) or "none are declared"
                return f"message {number}: a call to {name!r}, which is not a declared tool ({known})"
        pending = len(calls)
    return None
