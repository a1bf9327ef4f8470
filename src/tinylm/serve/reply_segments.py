"""One chat choice's deltas read as OpenAI's message fields: content, reasoning_content and tool_calls.

`Generation` labels every delta with its segment (content, reasoning, or call number k). Content and
reasoning pass through as they come. A call is held until it ends, since a client can do nothing
with half a name or half the JSON of its arguments: when <|/call|> closes it, it leaves whole as one
`tool_calls` entry (streamed with its `index`, as OpenAI streams them). A call that is not
`NAME\\nJSON-object`, that names a tool the request does not declare, or that the budget cut off, is
not a call a client could run: its text joins the content, so nothing the model wrote is lost. A
choice that made a call and stopped by itself ends with finish_reason "tool_calls".

The same reader builds the whole reply and the stream, so the two always say the same thing: the
whole message is `message_of` the pieces the stream sends.
"""

from __future__ import annotations

import uuid
from collections.abc import Collection
from typing import Any

from tinylm.serve.generation import Delta
from tinylm.tokenizer.reply_parser import ParsedCall, parse_call


class ReplySegments:
    def __init__(self, declared: Collection[str], forced: str | None = None) -> None:
        """`declared`: the names of the tools the request declares; `forced`: the opening of the first call the
        prompt already wrote (tool_choice), or None."""
        self.declared, self.forced = declared, forced
        self.open: int = 1 if forced is not None else 0  # the call being written (0: none)
        self.pending = forced or ""  # its text so far
        self.pieces: list[dict[str, Any]] = []  # every message delta released so far
        self.calls: list[dict[str, Any]] = []  # OpenAI entries, in order

    def read(self, delta: Delta) -> list[dict[str, Any]]:
        """The message deltas `delta` releases, in order: {"content"}, {"reasoning_content"} or {"tool_calls"}."""
        out: list[dict[str, Any]] = []
        if self.open and (delta.segment, delta.call) != ("call", self.open):
            out += self._end_call(closed=delta.segment == "content")  # only <|/call|> leads back to content
        if delta.segment == "call":
            self.open = delta.call
            self.pending += delta.text
            if delta.finish_reason is not None:  # the budget or a stop ended the reply inside the call
                out += self._end_call(closed=False)
        elif delta.text:
            out.append({"reasoning_content" if delta.segment == "reasoning" else "content": delta.text})
        self.pieces += out
        return out

    def finish_reason(self, reason: str | None) -> str | None:
        return "tool_calls" if reason == "stop" and self.calls else reason

    def message(self) -> dict[str, Any]:
        """The whole assistant message (after every delta was read)."""
        return message_of(self.pieces)

    def _end_call(self, closed: bool) -> list[dict[str, Any]]:
        call: ParsedCall = parse_call(self.pending, closed)
        text, self.open, self.pending = self.pending, 0, ""
        if call.error is not None or call.name not in self.declared:
            return [{"content": text}] if text else []
        entry = {"id": f"call_{uuid.uuid4().hex[:24]}", "type": "function",
                 "function": {"name": call.name, "arguments": call.arguments}}
        self.calls.append(entry)
        return [{"tool_calls": [{"index": len(self.calls) - 1, **entry}]}]


def message_of(pieces: list[dict[str, Any]]) -> dict[str, Any]:
    """The assistant message that message deltas add up to: content and reasoning joined, the calls in order
    (content None beside calls, as OpenAI sends it; "" when there is neither)."""
    content = "".join(piece.get("content", "") for piece in pieces)
    reasoning = "".join(piece.get("reasoning_content", "") for piece in pieces)
    calls = [{k: v for k, v in call.items() if k != "index"}
             for piece in pieces for call in piece.get("tool_calls", [])]
    message: dict[str, Any] = {"role": "assistant", "content": content or (None if calls else "")}
    if reasoning:
        message["reasoning_content"] = reasoning
    if calls:
        message["tool_calls"] = calls
    return message
