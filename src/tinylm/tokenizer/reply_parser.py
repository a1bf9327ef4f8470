"""A generated assistant turn read back from its ids: reasoning, content and tool calls, as the format wrote them.

The inverse of `ChatFormat.render` for one assistant message, on the ids the model produced (the
stop token excluded). The reply is split at the agent tokens, so nothing a model writes as text can
pass for a call:

    [<|think|> reasoning <|/think|>] content (<|call|> name \\n arguments <|/call|>)*

A call whose text is not `name\\nJSON-object` (or that never closes) is kept with the reason it is
malformed: the tool loop answers it with that error as the result, and a reward can count it.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from typing import Any

from tinylm.tokenizer.chat_format import ChatFormat
from tinylm.tokenizer.chat_tokens import CALL, END_CALL, END_THINK, THINK


@dataclass(frozen=True)
class ParsedCall:
    name: str
    arguments: str  # the JSON text the model wrote
    error: str | None = None  # why the call is malformed, or None

    def as_openai(self, index: int) -> dict[str, Any]:
        """The call as OpenAI's `tool_calls` entry (the id names the call within its reply)."""
        return {"id": f"call_{index}", "type": "function",
                "function": {"name": self.name, "arguments": self.arguments}}


@dataclass
class ParsedReply:
    content: str
    reasoning: str = ""
    calls: list[ParsedCall] = field(default_factory=list)

    def message(self) -> dict[str, Any]:
        """The reply as an assistant message (OpenAI's fields: content, reasoning_content, tool_calls)."""
        message: dict[str, Any] = {"role": "assistant", "content": self.content}
        if self.reasoning:
            message["reasoning_content"] = self.reasoning
        if self.calls:
            message["tool_calls"] = [call.as_openai(i) for i, call in enumerate(self.calls)]
        return message


def parse_call(text: str, closed: bool) -> ParsedCall:
    """One call's text (between <|call|> and <|/call|>) as name and arguments, or with why it is malformed."""
    name, newline, arguments = text.partition("\n")
    name = name.strip()
    if not closed:
        return ParsedCall(name, arguments, "the call was never closed with <|/call|>")
    if not newline or not name:
        return ParsedCall(name, arguments, "a call is the tool's name, a newline, then JSON arguments")
    try:
        parsed = json.loads(arguments)
    except json.JSONDecodeError as error:
        return ParsedCall(name, arguments, f"the arguments are not JSON ({error.msg})")
    if not isinstance(parsed, dict):
        return ParsedCall(name, arguments, "the arguments must be a JSON object")
    return ParsedCall(name, arguments)


def parse_reply(chat: ChatFormat, ids: list[int]) -> ParsedReply:
    """The assistant turn that `ids` (generated after <|assistant|>, stop token excluded) spell."""
    agent = chat.agent_ids
    decode = chat.tokenizer.decode
    if agent is None:
        return ParsedReply(decode(ids))
    think, end_think, call, end_call = agent[THINK], agent[END_THINK], agent[CALL], agent[END_CALL]
    reasoning, rest = "", list(ids)
    if rest[:1] == [think]:
        close = rest.index(end_think) if end_think in rest else len(rest)
        reasoning, rest = decode(rest[1:close]), rest[close + 1:]
    content: list[int] = []
    calls: list[ParsedCall] = []
    i = 0
    while i < len(rest):
        if rest[i] != call:
            if rest[i] not in (think, end_think, end_call):  # a stray marker is not text
                content.append(rest[i])
            i += 1
            continue
        close = rest.index(end_call, i + 1) if end_call in rest[i + 1:] else len(rest)
        calls.append(parse_call(decode(rest[i + 1:close]), close < len(rest)))
        i = close + 1
    return ParsedReply(decode(content), reasoning, calls)
