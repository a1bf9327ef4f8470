"""Built-in tools the server runs itself: `tinylm serve --tools calculator,python`, asked for per request.

A request that sends `"builtin_tools": ["calculator"]` (from the openai client: `extra_body=`) has the
tool declared in its prompt, after any tools of its own, and the server runs the model's calls to it:
when a round of generation ends with calls to built-in tools only, each runs (`run_call`: time and
output limits, a failure is its error text), the assistant turn and one tool turn per result join
the conversation, and the model goes on, for up to MAX_TURNS rounds and the request's token budget.
A round that calls one of the client's own tools (or mixes them) goes back to the client as
`tool_calls`, as without built-in tools.

The reply's message says what every round wrote, in order (content and reasoning joined; the rounds
before an answer usually write none), and `tool_messages`: the assistant and tool messages the
server added, which a client continuing the conversation puts before the reply. A stream sends each
round's text as it comes and each round's calls and results as one `tool_messages` delta. `usage`
counts every round's prompt and completion.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from typing import Any

from tinylm.inference.tool_loop import MAX_TURNS
from tinylm.serve.generation import Delta, Generation
from tinylm.serve.jobs import ChatPrompt, chat_jobs, start_chat
from tinylm.serve.protocol import APIError, ChatCompletionRequest, ChatMessage
from tinylm.serve.replies import ChatReply, usage
from tinylm.serve.reply_segments import ReplySegments, message_of
from tinylm.serve.scheduler import Job
from tinylm.serve.served_model import ServedModel
from tinylm.tokenizer.tool_calls import tool_name
from tinylm.tools.registry import Tool
from tinylm.tools.run_call import run_call

# (the delta read, the message pieces it releases, the choice's finish reason once it is known)
Step = tuple[Delta | None, list[dict[str, Any]], str | None]


def builtin_tools_of(served: ServedModel, body: ChatCompletionRequest) -> list[Tool]:
    """The built-in tools `body` asks the server to run; APIError 400 for a request it cannot honour."""
    offered = {tool.name: tool for tool in served.tools}
    names = list(dict.fromkeys(body.builtin_tools or []))
    unknown = [name for name in names if name not in offered]
    if unknown:
        runs = f"it runs {', '.join(offered)}" if offered else "start it with tinylm serve --tools calculator,python"
        raise APIError(400, f"this server runs no built-in tool {unknown[0]!r} ({runs})", "builtin_tools")
    clash = sorted({tool_name(tool) for tool in body.tools or []} & set(names))
    if clash:
        raise APIError(400, f"{clash[0]!r} is both a built-in tool and one the request declares", "builtin_tools")
    if body.n != 1:
        raise APIError(400, "builtin_tools runs one conversation: n must be 1", "n")
    if served.chat_format is None or not served.chat_format.speaks_tools:
        raise APIError(400, "this model's tokenizer has no tool tokens, so it cannot call a tool", "builtin_tools")
    return [offered[name] for name in names]


class BuiltinToolReply(ChatReply):
    """A chat reply over as many rounds as the model's calls to built-in tools take."""

    def __init__(self, served: ServedModel, body: ChatCompletionRequest, tools: list[Tool]) -> None:
        super().__init__(served, body, None, 0, frozenset())  # type: ignore[arg-type] - one generation per round, below
        self.tools, self.names = tools, {tool.name for tool in tools}
        self.declared = [*(body.tools or []), *(tool.declaration() for tool in tools)]
        self.messages: list[ChatMessage] = list(body.messages)
        self.tool_messages: list[dict[str, Any]] = []
        self.generations: list[Generation] = []
        self.completion_tokens = 0
        self.budget = body.max_completion_tokens if body.max_completion_tokens is not None else body.max_tokens
        self.first = self._jobs(body.tool_choice)  # a bad request is a 400 before any reply starts

    def cancel(self) -> None:
        for generation in self.generations:
            generation.cancel()

    def _usage(self) -> dict[str, int]:
        return usage(self.prompt_tokens, self.completion_tokens)

    def _jobs(self, tool_choice: Any) -> tuple[list[Job], ChatPrompt]:
        """The next round's jobs: the conversation so far, every tool declared, the budget that is left."""
        left = None if self.budget is None else self.budget - self.completion_tokens
        request = self.body.model_copy(update={"messages": self.messages, "tools": self.declared,
                                               "tool_choice": tool_choice, "max_completion_tokens": None,
                                               "max_tokens": left})
        return chat_jobs(self.served, request)

    async def _steps(self) -> AsyncIterator[Step]:
        jobs, prompt = self.first
        for round_number in range(1, MAX_TURNS + 1):
            self.prompt_tokens += len(prompt.ids)
            generation = start_chat(self.served, self.body, jobs, prompt)
            self.generations.append(generation)
            segments, finish = ReplySegments(prompt.names, prompt.forced), None
            async for delta in generation.deltas():
                finish = delta.finish_reason
                yield delta, [p for p in segments.read(delta) if "tool_calls" not in p], None
            self.completion_tokens += generation.choices[0].completion_tokens
            calls = segments.calls
            ours = bool(calls) and finish == "stop" and all(c["function"]["name"] in self.names for c in calls)
            if not ours or round_number == MAX_TURNS:
                yield None, [{"tool_calls": [{"index": i, **call}]} for i, call in enumerate(calls)], \
                    segments.finish_reason(finish)
                return
            added = [segments.message(), *[await self._run(call) for call in calls]]
            self.tool_messages += added
            self.messages += [ChatMessage(**message) for message in added]
            yield None, [{"tool_messages": added}], None
            if self.budget is not None and self.completion_tokens >= self.budget:
                yield None, [], "length"
                return
            jobs, prompt = self._jobs(None)  # the forced call, if any, was the first round's

    async def _run(self, call: dict[str, Any]) -> dict[str, Any]:
        function = call["function"]
        result = await asyncio.to_thread(run_call, function["name"], function["arguments"], self.tools)
        return {"role": "tool", "tool_call_id": call["id"], "content": result.content}

    async def whole(self) -> dict[str, Any]:
        said: list[dict[str, Any]] = []
        deltas: list[Delta] = []
        finish = None
        async for delta, pieces, end in self._steps():
            deltas += [delta] if delta is not None else []
            said += pieces
            finish = end or finish
        message = {**message_of(said), "tool_messages": self.tool_messages}
        choice = {"index": 0, "message": message, "logprobs": self._logprobs(deltas), "finish_reason": finish}
        return self._object([choice], usage=self._usage())

    async def chunks(self) -> AsyncIterator[dict[str, Any]]:
        kind = "chat.completion.chunk"
        yield self._object([{"index": 0, "delta": {"role": "assistant", "content": ""}, "logprobs": None,
                             "finish_reason": None}], kind)
        async for delta, pieces, end in self._steps():
            for chunk in self._chunks_of(0, pieces, self._logprobs([delta]) if delta is not None else None, end):
                yield chunk
        if self.body.include_usage():
            yield self._object([], kind, usage=self._usage())
