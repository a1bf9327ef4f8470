"""The OpenAI request fields tinylm understands, and errors as OpenAI clients expect them.

Requests are pydantic models, so a wrong type or a number outside OpenAI's range is refused by FastAPI
before any work (422); what needs the model to check (the model name, the prompt against the window)
and what OpenAI's rules say of a tool declaration (`declarations_problem`) are refused by the routes with
`APIError` (400/404). Unknown fields are ignored, as OpenAI's own server does for ones it has
retired, so clients that send extra options keep working.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from typing import Any, Literal

from pydantic import BaseModel, Field

from tinylm.tokenizer.chat_format import TEXT_PART_SEPARATOR


class APIError(Exception):
    """An error to send as {"error": {"message", "type", "param", "code"}} with `status`."""

    def __init__(self, status: int, message: str, param: str | None = None, code: str | None = None,
                 type: str = "invalid_request_error") -> None:  # noqa: A002 - OpenAI's field name
        super().__init__(message)
        self.status, self.message, self.param, self.code, self.type = status, message, param, code, type

    def body(self) -> dict:
        return error_body(self.message, self.type, self.param, self.code)


def error_body(message: str, type: str, param: str | None = None, code: str | None = None) -> dict:  # noqa: A002
    return {"error": {"message": message, "type": type, "param": param, "code": code}}


class StreamOptions(BaseModel):
    include_usage: bool = False


class Sampling(BaseModel):
    """Fields both endpoints share."""

    model: str
    max_tokens: int | None = Field(default=None, ge=0)  # 0: a completion that only scores its prompt (echo)
    temperature: float = Field(default=1.0, ge=0, le=2)  # OpenAI's range
    top_p: float = Field(default=1.0, gt=0, le=1)
    top_k: int | None = Field(default=None, ge=-1)  # -1 or None: off (vLLM's convention)
    min_p: float = Field(default=0.0, ge=0, le=1)
    stop: str | list[str] | None = None
    seed: int | None = Field(default=None, ge=-(2**63), le=2**63 - 1)  # what a torch.Generator accepts
    n: int = Field(default=1, ge=1, le=16)
    stream: bool = False
    stream_options: StreamOptions | None = None
    # vLLM's extensions, which RL trainers send: token ids back ("token_id:N" in log-probs), stops by id
    return_tokens_as_token_ids: bool = False
    stop_token_ids: list[int] | None = None  # end a choice at any of these (besides the model's own stops)
    ignore_eos: bool = False  # the model's own stops end nothing: only stop_token_ids (and stop strings) do

    def stop_strings(self) -> list[str]:
        return [self.stop] if isinstance(self.stop, str) else list(self.stop or [])

    def include_usage(self) -> bool:
        return bool(self.stream and self.stream_options and self.stream_options.include_usage)


class CompletionRequest(Sampling):
    prompt: str | list[str] | list[int] | list[list[int]]
    echo: bool = False
    logprobs: int | None = Field(default=None, ge=0, le=20)


class ContentPart(BaseModel):
    """One part of OpenAI's list-of-parts content; only text parts can be read by a text model."""

    type: str
    text: str | None = None


class ToolCallFunction(BaseModel):
    name: str
    arguments: str | dict[str, Any] = "{}"  # JSON text in OpenAI's shape; an object is accepted too


class ToolCall(BaseModel):
    """A call an earlier assistant message made (sent back by a client that ran the tool)."""

    id: str | None = None
    type: Literal["function"] = "function"
    function: ToolCallFunction


class ChatMessage(BaseModel):
    role: Literal["system", "user", "assistant", "tool"]
    content: str | list[ContentPart] | None = None  # None: an assistant message that only called tools
    tool_calls: list[ToolCall] | None = None
    tool_call_id: str | None = None
    reasoning_content: str | None = None

    def as_dict(self, number: int) -> dict[str, Any]:
        """The message as the chat format reads it (text, calls, reasoning)."""
        message: dict[str, Any] = {"role": self.role, "content": self.text(number)}
        if self.tool_calls:
            message["tool_calls"] = [call.model_dump() for call in self.tool_calls]
        if self.reasoning_content:
            message["reasoning_content"] = self.reasoning_content
        return message

    def text(self, number: int) -> str:
        """The content as one string: text parts joined with newlines (as vLLM does); APIError for any other part."""
        if self.content is None:
            return ""
        if isinstance(self.content, str):
            return self.content
        for index, part in enumerate(self.content, 1):
            if part.type != "text":
                raise APIError(400, f"message {number}: content part {index} is of type {part.type!r}; this model "
                               "reads text parts only", "messages", "unsupported_content")
            if part.text is None:
                raise APIError(400, f"message {number}: content part {index} is a text part without 'text'",
                               "messages")
        return TEXT_PART_SEPARATOR.join(part.text or "" for part in self.content)


class ChatCompletionRequest(Sampling):
    messages: list[ChatMessage]
    tools: list[dict[str, Any]] | None = None  # OpenAI's {"type": "function", "function": {...}} declarations
    # "auto" (the default with tools), "none", "required", or {"type": "function", "function": {"name": N}}
    tool_choice: Literal["auto", "none", "required"] | dict[str, Any] | None = None
    # tinylm's extension: built-in tools (of `tinylm serve --tools`) the server declares and runs itself
    builtin_tools: list[str] | None = None
    max_tokens: int | None = Field(default=None, ge=1)  # a chat reply of no token is refused, as OpenAI does
    max_completion_tokens: int | None = Field(default=None, ge=1)
    logprobs: bool = False
    top_logprobs: int | None = Field(default=None, ge=0, le=20)


# OpenAI's rule for a function's name; it also keeps a call's text, NAME\nARGUMENTS, readable back
TOOL_NAME = re.compile(r"[a-zA-Z0-9_-]{1,64}")
TOOL_NAME_RULE = "^[a-zA-Z0-9_-]{1,64}$ (letters, digits, '_' and '-', at most 64: OpenAI's rule)"


def name_problem(name: str) -> str | None:
    """Why `name` cannot name a tool, or None."""
    return None if TOOL_NAME.fullmatch(name) else f"name {name!r} does not match {TOOL_NAME_RULE}"


def declarations_problem(tools: list[dict[str, Any]]) -> str | None:
    """What OpenAI refuses in a list of tool declarations, or None: a type other than "function", a name
    outside OpenAI's rule, parameters that are not an object schema. Accepting them would declare to the
    model what no OpenAI client could send; a missing name or a duplicate is the chat format's to say."""
    for number, tool in enumerate(tools, 1):
        kind = tool.get("type")
        if kind != "function":
            said = "has no type" if kind is None else f"is of type {kind!r}"
            return f"tool {number} {said}: only {{'type': 'function', 'function': ...}} tools can be declared"
        function = tool.get("function")
        name = function.get("name") if isinstance(function, Mapping) else None
        if not isinstance(name, str):
            continue
        if problem := name_problem(name):
            return f"tool {number}: the {problem}"
        parameters = function.get("parameters", {})
        if not isinstance(parameters, Mapping):
            return f"tool {number} ({name!r}): parameters must be a JSON Schema object, got {type(parameters).__name__}"
        if parameters.get("type", "object") != "object":
            return (f"tool {number} ({name!r}): parameters must be a JSON Schema of type 'object', got "
                    f"{parameters['type']!r}")
    return None


class ReloadRequest(BaseModel):
    """POST /admin/reload: serve the weights of this checkpoint (a run or checkpoint folder on the server)."""

    checkpoint: str
