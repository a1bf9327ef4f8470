"""One chat choice's deltas read as OpenAI's message fields: content, reasoning_content and tool_calls.

`Generation` labels every delta with its segment (content, reasoning, or call number k). Content and
reasoning pass through as they come. A call is held until it ends, since a client can do nothing
with half a name or half the JSON of its arguments: when <|/call|> closes it, it leaves whole as one
`tool_calls` entry (streamed with its `index`, as OpenAI streams them). A call that is not
`NAME\\nJSON-object`, or that the budget cut off, is not a call a client could run: its text joins
the content, so nothing the model wrote is lost. A choice that made a call and stopped by itself
ends with finish_reason "tool_calls".

The same reader builds the whole reply and the stream, so the two always say the same thing.
"""

from __future__ import annotations

import uuid
from typing import Any

from tinylm.serve.generation import Delta
from tinylm.tokenizer.reply_parser import ParsedCall, parse_call


class ReplySegments:
    def __init__(self, forced: str | None = None) -> None:
        """`forced`: the opening of the first call the prompt already wrote (tool_choice), or None."""
        self.forced = forced
        self.open: int = 1 if forced is not None else 0  # the call being written (0: none)
        self.pending = forced or ""  # its text so far
        self.content: list[str] = []
        self.reasoning: list[str] = []
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
            key = "reasoning_content" if delta.segment == "reasoning" else "content"
            (self.reasoning if key == "reasoning_content" else self.content).append(delta.text)
            out.append({key: delta.text})
        return out

    def finish_reason(self, reason: str | None) -> str | None:
        return "tool_calls" if reason == "stop" and self.calls else reason

    def message(self) -> dict[str, Any]:
        """The whole assistant message (after every delta was read)."""
        message: dict[str, Any] = {"role": "assistant", "content": "".join(self.content) or None}
        if self.reasoning:
            message["reasoning_content"] = "".join(self.reasoning)
        if self.calls:
            message["tool_calls"] = self.calls
        elif message["content"] is None:
            message["content"] = ""
        return message

    def _end_call(self, closed: bool) -> list[dict[str, Any]]:
        call: ParsedCall = parse_call(self.pending, closed)
        text, self.open, self.pending = self.pending, 0, ""
        if call.error is not None:
            self.content.append(text)
            return [{"content": text}] if text else []
        entry = {"id": f"call_{uuid.uuid4().hex[:24]}", "type": "function",
                 "function": {"name": call.name, "arguments": call.arguments}}
        self.calls.append(entry)
        return [{"tool_calls": [{"index": len(self.calls) - 1, **entry}]}]
