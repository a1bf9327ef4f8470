"""A generation's deltas shaped as OpenAI replies: one JSON object, or the chunks of a stream.

Completions are `text_completion` objects (with `echo`, the prompt's text and log-probs come first);
chat replies are `chat.completion` objects, streamed as `chat.completion.chunk`s that open with the
assistant role (reasoning and calls in their own fields: `reply_segments.py`). Every choice's
`finish_reason` appears exactly once, in its last chunk; a usage-only chunk (no choices) closes the
stream when `stream_options.include_usage` asks for it. `usage` counts a prompt once however many
samples `n` draws from it.
"""

from __future__ import annotations

import time
import uuid
from collections.abc import AsyncIterator
from typing import Any

from tinylm.serve.generation import Delta, Generation
from tinylm.serve.logprobs import CompletionLogprobs, chat_logprobs
from tinylm.serve.protocol import ChatCompletionRequest, CompletionRequest
from tinylm.serve.reply_segments import ReplySegments
from tinylm.serve.served_model import ServedModel


def usage(prompt_tokens: int, completion_tokens: int) -> dict[str, int]:
    return {"prompt_tokens": prompt_tokens, "completion_tokens": completion_tokens,
            "total_tokens": prompt_tokens + completion_tokens}


class _Reply:
    kind = ""

    def __init__(self, served: ServedModel, generation: Generation, prompt_tokens: int, prefix: str) -> None:
        self.served, self.generation, self.prompt_tokens = served, generation, prompt_tokens
        self.id, self.created = f"{prefix}-{uuid.uuid4().hex[:24]}", int(time.time())

    def _object(self, choices: list[dict], kind: str | None = None, **extra: Any) -> dict[str, Any]:
        return {"id": self.id, "object": kind or self.kind, "created": self.created, "model": self.served.name,
                "choices": choices, **extra}

    def _usage(self) -> dict[str, int]:
        return usage(self.prompt_tokens, sum(c.completion_tokens for c in self.generation.choices))

    async def _collect(self) -> list[list[Delta]]:
        pieces: list[list[Delta]] = [[] for _ in self.generation.choices]
        async for delta in self.generation.deltas():
            pieces[delta.index].append(delta)
        return pieces


class CompletionReply(_Reply):
    kind = "text_completion"

    def __init__(self, served: ServedModel, body: CompletionRequest, generation: Generation,
                 prompts: list[list[int]]) -> None:
        super().__init__(served, generation, sum(len(ids) for ids in prompts[:: body.n]), "cmpl")
        self.body, self.prompts = body, prompts

    def _logprobs(self) -> CompletionLogprobs | None:
        """An empty log-probs object when the request asked for log-probs."""
        if self.body.logprobs is None:
            return None
        return CompletionLogprobs(self.served.tokenizer, self.body.return_tokens_as_token_ids)

    def _start(self, index: int) -> tuple[str, CompletionLogprobs | None]:
        """The text a choice starts with (its prompt, when echoing) and its log-probs so far."""
        logprobs = self._logprobs()
        if not self.body.echo:
            return "", logprobs
        if logprobs is not None:
            logprobs.add_prompt(self.prompts[index], self.generation.choices[index].prompt_logprobs)
        return self.served.tokenizer.decode(self.prompts[index]), logprobs

    async def whole(self) -> dict[str, Any]:
        choices = []
        for index, deltas in enumerate(await self._collect()):
            head, logprobs = self._start(index)
            for delta in deltas if logprobs is not None else ():
                logprobs.add_tokens(delta.tokens, delta.offsets, len(head))
            choices.append({"index": index, "text": head + "".join(d.text for d in deltas),
                            "logprobs": logprobs and logprobs.body, "finish_reason": deltas[-1].finish_reason})
        return self._object(choices, usage=self._usage())

    async def chunks(self) -> AsyncIterator[dict[str, Any]]:
        started: set[int] = set()
        async for delta in self.generation.deltas():
            if delta.index in started:
                head = ""
                logprobs = self._logprobs()
            else:
                started.add(delta.index)
                head, logprobs = self._start(delta.index)
            if logprobs is not None:
                logprobs.add_tokens(delta.tokens, delta.offsets, len(head))
            yield self._object([{"index": delta.index, "text": head + delta.text,
                                 "logprobs": logprobs and logprobs.body, "finish_reason": delta.finish_reason}])
        if self.body.include_usage():
            yield self._object([], usage=self._usage())


class ChatReply(_Reply):
    """A chat reply; with segments (a tool-speaking model), reasoning and calls leave in their own fields."""

    kind = "chat.completion"

    def __init__(self, served: ServedModel, body: ChatCompletionRequest, generation: Generation,
                 prompt_tokens: int, declared: frozenset[str], forced: str | None = None) -> None:
        super().__init__(served, generation, prompt_tokens, "chatcmpl")
        self.body, self.declared, self.forced = body, declared, forced

    def _logprobs(self, deltas: list[Delta]) -> dict | None:
        if not self.body.logprobs:
            return None
        return chat_logprobs(self.served.tokenizer, [token for delta in deltas for token in delta.tokens],
                             self.body.return_tokens_as_token_ids)

    async def whole(self) -> dict[str, Any]:
        choices = []
        for index, deltas in enumerate(await self._collect()):
            segments = ReplySegments(self.declared, self.forced)
            for delta in deltas:
                segments.read(delta)
            choices.append({"index": index, "message": segments.message(), "logprobs": self._logprobs(deltas),
                            "finish_reason": segments.finish_reason(deltas[-1].finish_reason)})
        return self._object(choices, usage=self._usage())

    def _chunks_of(self, index: int, pieces: list[dict[str, Any]], logprobs: dict | None,
                   finish: str | None) -> list[dict[str, Any]]:
        """One chunk per message piece (log-probs on the first, the finish reason on the last); none for a
        delta that released nothing (a call still being written) unless it carries one of those."""
        if not pieces and finish is None and logprobs is None:
            return []
        pieces = pieces or [{}]
        return [self._object([{"index": index, "delta": piece, "logprobs": logprobs if number == 0 else None,
                               "finish_reason": finish if number == len(pieces) - 1 else None}],
                             "chat.completion.chunk") for number, piece in enumerate(pieces)]

    async def chunks(self) -> AsyncIterator[dict[str, Any]]:
        kind = "chat.completion.chunk"
        segments = [ReplySegments(self.declared, self.forced) for _ in self.generation.choices]
        for index in range(len(self.generation.choices)):
            yield self._object([{"index": index, "delta": {"role": "assistant", "content": ""}, "logprobs": None,
                                 "finish_reason": None}], kind)
        async for delta in self.generation.deltas():
            reader = segments[delta.index]
            pieces = reader.read(delta)
            for chunk in self._chunks_of(delta.index, pieces, self._logprobs([delta]),
                                         reader.finish_reason(delta.finish_reason)):
                yield chunk
        if self.body.include_usage():
            yield self._object([], kind, usage=self._usage())
