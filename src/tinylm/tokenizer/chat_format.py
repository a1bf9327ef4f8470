"""The chat format: a conversation as token ids, plus the loss mask that says which ids the model learns.

    <|endoftext|> <|role|> content <|end|> <|role|> content <|end|> ...      (a conversation)
    ... <|user|> content <|end|> <|assistant|>                              (a prompt to generate from)
    <|system|> content \n\nTools:\n{tool json} ... <|end|>                   (tools declared)
    <|assistant|> <|think|> reasoning <|/think|> content <|call|> name\n{args} <|/call|> <|end|>
    <|tool|> result <|end|>                                                  (a tool's answer to a call)

Every marker is a special token and nothing but contents is text, so the ids of a conversation are
the ids of its parts laid end to end, and `transformers` (which renders the exported Jinja template
to one string and tokenizes that) produces the very same ids. The loss mask is 1 exactly on the
tokens of assistant contents and on the <|end|> that closes each assistant message: the model learns
what to answer and when to stop, never to predict what the user or the system says. With tools, the
mask also covers an assistant's tool calls (markers included), and its reasoning segment unless
`learn_reasoning=False`; never a tool's result, which the model reads but does not write. No block
is ever inserted: a message without reasoning has no <|think|> segment (`tool_calls.py` has the rest).

A message's content is text, never markup: special-token text inside it ("<|end|>" typed by a user)
is encoded as ordinary text, piece by piece between such texts, which is what `transformers` does
with `apply_chat_template(..., sanitize_control_tokens=True)`. So no content can end a turn or
change roles.
"""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from functools import cached_property
from typing import Any

from tinylm.errors import TinyLMError
from tinylm.tokenizer.chat_tokens import (
    AGENT_TOKENS,
    CALL,
    END_CALL,
    END_OF_TURN,
    END_THINK,
    ROLE_TOKENS,
    THINK,
    TOOL_ROLE,
)
from tinylm.tokenizer.tokenizer import Tokenizer
from tinylm.tokenizer.tool_calls import (
    TOOLS_HEADER,
    call_text,
    conversation_problem,
    reasoning_of,
    tools_problem,
    tools_text,
)

ROLES = tuple(ROLE_TOKENS)
AGENT_ROLES = (*ROLES, "tool")
# OpenAI-style content parts become one text, the text parts joined by this (as vLLM joins them), in training
# data and in the server alike, so a conversation is the same ids wherever it comes from
TEXT_PART_SEPARATOR = "\n"


@dataclass(frozen=True)
class Rendered:
    """A rendered conversation: `ids`, `mask` (1 where the loss applies), `n_learn` (assistant content tokens)."""

    ids: list[int]
    mask: list[int]
    n_learn: int


class ChatFormat:
    """Renders conversations for one tokenizer; build it with `ChatFormat.from_tokenizer`."""

    def __init__(self, tokenizer: Tokenizer, role_ids: dict[str, int], end_id: int,
                 agent_ids: dict[str, int] | None = None) -> None:
        self.tokenizer = tokenizer
        self.role_ids = role_ids
        self.end_id = end_id
        self.eot_id = tokenizer.eot_id
        self.agent_ids = agent_ids  # the agent tokens' ids, or None for a tokenizer from before them

    @classmethod
    def from_tokenizer(cls, tokenizer: Tokenizer) -> ChatFormat:
        """The chat format of `tokenizer`; TinyLMError if it lacks the chat special tokens."""
        specials = tokenizer.special_tokens
        missing = [t for t in (*ROLE_TOKENS.values(), END_OF_TURN) if t not in specials]
        if missing:
            raise TinyLMError(f"tokenizer {tokenizer.name} has no chat token(s) {', '.join(missing)}: add them with "
                              "tinylm.tokenizer.chat_tokens.with_chat_tokens (tinylm sft does) and grow the model "
                              "with tinylm.models.vocab_growth")
        agent = {t: specials[t] for t in AGENT_TOKENS} if all(t in specials for t in AGENT_TOKENS) else None
        role_ids = {role: specials[text] for role, text in ROLE_TOKENS.items()}
        if agent:
            role_ids["tool"] = agent[TOOL_ROLE]
        return cls(tokenizer, role_ids, specials[END_OF_TURN], agent)

    @property
    def stop_ids(self) -> tuple[int, int]:
        """Generation stops at the end of the assistant's turn (or, should it write one, at end-of-text)."""
        return self.end_id, self.eot_id

    @property
    def roles(self) -> tuple[str, ...]:
        """The roles a message may have: the tool's too when the tokenizer has the agent tokens."""
        return AGENT_ROLES if self.speaks_tools else ROLES

    @property
    def speaks_tools(self) -> bool:
        """Whether the tokenizer has the agent tokens: tool turns, tool calls and reasoning."""
        return self.agent_ids is not None

    # ---- checking -------------------------------------------------------------------------------
    def _agent_problem(self, what: str) -> str | None:
        if self.speaks_tools:
            return None
        return (f"{what} needs the agent tokens ({', '.join(AGENT_TOKENS)}), which tokenizer {self.tokenizer.name} "
                "lacks: fine-tune it with tinylm sft, which adds them")

    def _message_problem(self, number: int, message: object) -> str | None:
        if not isinstance(message, Mapping) or "role" not in message:
            return f"message {number} is not a {{'role': ..., 'content': ...}} mapping"
        role = message["role"]
        if not isinstance(role, str) or role not in AGENT_ROLES:
            return f"message {number}: unknown role {role!r} (expected {', '.join(self.roles)})"
        if role == "tool":
            return self._agent_problem(f"message {number} (a tool result)") or (
                None if isinstance(message.get("content"), str) else
                f"message {number} (tool): content must be a string, got {type(message.get('content')).__name__}")
        agent_fields = [key for key in ("tool_calls", "reasoning_content", "thinking", "reasoning") if message.get(key)]
        if agent_fields and role != "assistant":
            return f"message {number} ({role}): only an assistant message has {agent_fields[0]}"
        if agent_fields and (problem := self._agent_problem(f"message {number} ({agent_fields[0]})")):
            return problem
        content = message.get("content")
        if content is None and role == "assistant" and message.get("tool_calls"):
            content = ""  # OpenAI sends content null with tool calls
        if not isinstance(content, str):
            if "content" not in message:
                return f"message {number} is not a {{'role': ..., 'content': ...}} mapping"
            return f"message {number} ({role}): content must be a string, got {type(content).__name__}"
        if not isinstance(reasoning_of(message), str):
            return f"message {number} (assistant): reasoning must be a string"
        if role == "system" and number != 1:
            return f"message {number}: a system message may only come first"
        return None

    def problem(self, messages: object, tools: object = None) -> str | None:
        """Why `messages` (with `tools` declared) is not a conversation this format can render, or None."""
        if not isinstance(messages, Sequence) or isinstance(messages, (str, bytes)):
            return f"a conversation is a list of messages, got {type(messages).__name__}"
        if not messages:
            return "a conversation needs at least one message"
        tools = declared_tools(messages, tools)
        for number, message in enumerate(messages, 1):
            if problem := self._message_problem(number, message):
                return problem
        if tools and (problem := self._agent_problem("declaring tools") or tools_problem(tools)):
            return problem
        return conversation_problem(messages, tools)  # type: ignore[arg-type]

    def validate(self, messages: object, tools: object = None) -> None:
        """TinyLMError naming the first problem of `messages` (see `problem`)."""
        problem = self.problem(messages, tools)
        if problem is not None:
            raise TinyLMError(problem)

    # ---- rendering ------------------------------------------------------------------------------
    @cached_property
    def _special_text(self) -> re.Pattern[str]:
        """Any special token's text, longest first (so a token wins over one it contains)."""
        texts = sorted(self.tokenizer.special_tokens, key=len, reverse=True)
        return re.compile("|".join(map(re.escape, texts)) or "(?!)")

    def content_ids(self, text: str) -> list[int]:
        """Ids of a message's content: ordinary text throughout, split where special-token text stands."""
        if not self._special_text.search(text):
            return self.tokenizer.encode_ordinary(text)
        ids: list[int] = []
        start = 0
        for match in self._special_text.finditer(text):
            ids += self.tokenizer.encode_ordinary(text[start:match.start()])
            ids += self.tokenizer.encode_ordinary(match.group())
            start = match.end()
        return ids + self.tokenizer.encode_ordinary(text[start:])

    def _assistant_pieces(self, message: Mapping[str, Any], learn_reasoning: bool) -> list[tuple[list[int], int]]:
        """An assistant message after its role token, as (ids, learned) pieces: reasoning, content, calls, end."""
        pieces: list[tuple[list[int], int]] = []
        reasoning = reasoning_of(message)
        if reasoning:
            assert self.agent_ids is not None
            think = [self.agent_ids[THINK], *self.content_ids(reasoning), self.agent_ids[END_THINK]]
            pieces.append((think, int(learn_reasoning)))
        pieces.append((self.content_ids(message.get("content") or ""), 1))
        for call in message.get("tool_calls") or ():
            assert self.agent_ids is not None
            pieces.append(([self.agent_ids[CALL], *self.content_ids(call_text(call)), self.agent_ids[END_CALL]], 1))
        return pieces

    def render(self, messages: Sequence[Mapping[str, Any]], tools: Sequence[Mapping[str, Any]] | None = None, *,
               learn_reasoning: bool = True, check: bool = True) -> Rendered:
        """The ids of a whole conversation and its loss mask (1 on what the assistant writes, and its <|end|>).

        `tools` are declared at the end of the system turn (one is made for them if the conversation has
        none); without `tools`, a system message's own "tools" key declares them. `check=False` skips the
        whole-conversation checks, for a piece of a checked conversation.
        """
        tools = declared_tools(messages, tools)
        if check:
            self.validate(messages, tools)
        ids, mask, n_learn = [self.eot_id], [0], 0
        if tools and messages[0]["role"] != "system":
            messages = [{"role": "system", "content": ""}, *messages]
        for message in messages:
            role = message["role"]
            ids.append(self.role_ids[role])
            mask.append(0)
            if role == "assistant":
                for piece, learn in self._assistant_pieces(message, learn_reasoning):
                    ids += piece
                    mask += [learn] * len(piece)
                    n_learn += learn * len(piece)
                ids.append(self.end_id)
                mask.append(1)
                continue
            text = tools_text(message["content"], tools or ()) if role == "system" else message["content"]
            content = self.content_ids(text)
            ids += [*content, self.end_id]
            mask += [0] * (len(content) + 1)
        return Rendered(ids, mask, n_learn)

    def prompt_ids(self, messages: Sequence[Mapping[str, Any]],
                   tools: Sequence[Mapping[str, Any]] | None = None) -> list[int]:
        """The ids to generate the next assistant message from: the conversation, then <|assistant|>."""
        self.validate(messages, tools)
        if messages[-1]["role"] == "assistant":
            raise TinyLMError("a prompt ends with a user, system or tool message, not an assistant one")
        return [*self.render(messages, tools).ids, self.role_ids["assistant"]]

    # ---- the same format for transformers ----------------------------------------------------------
    def jinja_template(self) -> str:
        """The Hugging Face `chat_template` that renders exactly `render` (mask: `{% generation %}`)."""
        eot_text = next(text for text, id_ in self.tokenizer.special_tokens.items() if id_ == self.eot_id)
        return chat_template(eot_text, agent=self.speaks_tools)


def declared_tools(messages: Sequence[Any], tools: Any) -> Any:
    """`tools`, or when None the tools a conversation's system message carries (SFT data keeps them there)."""
    first = messages[0] if messages else None
    if tools is None and isinstance(first, Mapping) and first.get("role") == "system":
        return first.get("tools")
    return tools


def _literal(text: str) -> str:
    """`text` as a Jinja string literal (special-token texts never hold quotes or backslashes)."""
    if "'" in text or "\\" in text:
        raise ValueError(f"cannot quote {text!r} in the chat template")
    return f"'{text}'"


def _template_end(roles: str, assistant: str) -> str:
    """Both templates' ending: an unknown role is an error; the generation prompt is the assistant header."""
    return ("  {%- else -%}\n"
            "    {{- raise_exception('unknown role ' + message['role'] + ' (expected " + roles + ")') -}}\n"
            "  {%- endif -%}\n"
            "{%- endfor -%}\n"
            "{%- if add_generation_prompt -%}\n"
            "  {{- " + assistant + " -}}\n"
            "{%- endif -%}")


def chat_template(eot_text: str, agent: bool = True) -> str:
    """The Jinja chat template of the format; each marker written whole, so transformers sees its literal.

    `agent=False` is the template of a tokenizer without the agent tokens: roles and contents only.
    """
    role = {name: _literal(text) for name, text in ROLE_TOKENS.items()}
    end = _literal(END_OF_TURN)
    if not agent:
        roles = ", ".join(ROLES)
        return (
            "{{- " + _literal(eot_text) + " -}}\n"
            "{%- for message in messages -%}\n"
            "  {%- if message['role'] == 'system' and not loop.first -%}\n"
            "    {{- raise_exception('a system message may only come first') -}}\n"
            "  {%- elif message['role'] == 'system' -%}\n"
            "    {{- " + role["system"] + " + message['content'] + " + end + " -}}\n"
            "  {%- elif message['role'] == 'user' -%}\n"
            "    {{- " + role["user"] + " + message['content'] + " + end + " -}}\n"
            "  {%- elif message['role'] == 'assistant' -%}\n"
            "    {{- " + role["assistant"] + " -}}\n"
            "    {%- generation -%}\n"
            "      {{- message['content'] + " + end + " -}}\n"
            "    {%- endgeneration -%}\n"
            + _template_end(roles, role["assistant"])
        )
    tool, think, end_think = _literal(TOOL_ROLE), _literal(THINK), _literal(END_THINK)
    call, end_call, roles = _literal(CALL), _literal(END_CALL), ", ".join(AGENT_ROLES)
    return (
        "{{- " + _literal(eot_text) + " -}}\n"
        "{%- set learn = learn_reasoning is not defined or learn_reasoning -%}\n"
        "{%- if tools -%}\n"
        "  {%- set head = messages[0]['content'] if messages and messages[0]['role'] == 'system' else '' -%}\n"
        "  {{- " + role["system"] + " + (head + '\\n\\n' if head else '') + " + _literal(TOOLS_HEADER) + " -}}\n"
        "  {%- for declared in tools -%}\n"
        "    {{- '\\n' + (declared | tojson) -}}\n"
        "  {%- endfor -%}\n"
        "  {{- " + end + " -}}\n"
        "{%- endif -%}\n"
        "{%- for message in messages -%}\n"
        "  {%- if message['role'] == 'system' and not loop.first -%}\n"
        "    {{- raise_exception('a system message may only come first') -}}\n"
        "  {%- elif message['role'] == 'system' -%}\n"
        "    {%- if not tools -%}\n"
        "      {{- " + role["system"] + " + message['content'] + " + end + " -}}\n"
        "    {%- endif -%}\n"
        "  {%- elif message['role'] == 'user' -%}\n"
        "    {{- " + role["user"] + " + message['content'] + " + end + " -}}\n"
        "  {%- elif message['role'] == 'tool' -%}\n"
        "    {{- " + tool + " + message['content'] + " + end + " -}}\n"
        "  {%- elif message['role'] == 'assistant' -%}\n"
        "    {{- " + role["assistant"] + " -}}\n"
        "    {%- if message['reasoning_content'] is defined and message['reasoning_content'] -%}\n"
        "      {%- if learn -%}\n"
        "        {%- generation -%}\n"
        "          {{- " + think + " + message['reasoning_content'] + " + end_think + " -}}\n"
        "        {%- endgeneration -%}\n"
        "      {%- else -%}\n"
        "        {{- " + think + " + message['reasoning_content'] + " + end_think + " -}}\n"
        "      {%- endif -%}\n"
        "    {%- endif -%}\n"
        "    {%- generation -%}\n"
        "      {%- if message['content'] is defined and message['content'] is not none -%}\n"
        "        {{- message['content'] -}}\n"
        "      {%- endif -%}\n"
        "      {%- if message['tool_calls'] is defined and message['tool_calls'] -%}\n"
        "        {%- for tool_call in message['tool_calls'] -%}\n"
        "          {%- set function = tool_call['function'] if tool_call['function'] is defined else tool_call -%}\n"
        "          {%- set arguments = function['arguments'] if function['arguments'] is defined else {} -%}\n"
        "          {{- " + call + " + function['name'] + '\\n' -}}\n"
        "          {{- arguments if arguments is string else arguments | tojson -}}\n"
        "          {{- " + end_call + " -}}\n"
        "        {%- endfor -%}\n"
        "      {%- endif -%}\n"
        "      {{- " + end + " -}}\n"
        "    {%- endgeneration -%}\n"
        + _template_end(roles, role["assistant"])
    )
