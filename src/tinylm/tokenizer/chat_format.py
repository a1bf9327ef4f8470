"""The chat format: a conversation as token ids, plus the loss mask that says which ids the model learns.

    <|endoftext|> <|role|> content <|end|> <|role|> content <|end|> ...      (a conversation)
    ... <|user|> content <|end|> <|assistant|>                              (a prompt to generate from)

Every marker is a special token and nothing but contents is text, so the ids of a conversation are
the ids of its parts laid end to end, and `transformers` (which renders the exported Jinja template
to one string and tokenizes that) produces the very same ids. The loss mask is 1 exactly on the
tokens of assistant contents and on the <|end|> that closes each assistant message: the model learns
what to answer and when to stop, never to predict what the user or the system says.

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

from tinylm.errors import TinyLMError
from tinylm.tokenizer.chat_tokens import END_OF_TURN, ROLE_TOKENS
from tinylm.tokenizer.tokenizer import Tokenizer

ROLES = tuple(ROLE_TOKENS)
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

    def __init__(self, tokenizer: Tokenizer, role_ids: dict[str, int], end_id: int) -> None:
        self.tokenizer = tokenizer
        self.role_ids = role_ids
        self.end_id = end_id
        self.eot_id = tokenizer.eot_id

    @classmethod
    def from_tokenizer(cls, tokenizer: Tokenizer) -> ChatFormat:
        """The chat format of `tokenizer`; TinyLMError if it lacks the chat special tokens."""
        specials = tokenizer.special_tokens
        missing = [t for t in (*ROLE_TOKENS.values(), END_OF_TURN) if t not in specials]
        if missing:
            raise TinyLMError(f"tokenizer {tokenizer.name} has no chat token(s) {', '.join(missing)}: add them with "
                              "tinylm.tokenizer.chat_tokens.with_chat_tokens (tinylm sft does) and grow the model "
                              "with tinylm.models.vocab_growth")
        return cls(tokenizer, {role: specials[text] for role, text in ROLE_TOKENS.items()}, specials[END_OF_TURN])

    @property
    def stop_ids(self) -> tuple[int, int]:
        """Generation stops at the end of the assistant's turn (or, should it write one, at end-of-text)."""
        return self.end_id, self.eot_id

    # ---- checking -------------------------------------------------------------------------------
    def problem(self, messages: object) -> str | None:
        """Why `messages` is not a conversation this format can render, or None."""
        if not isinstance(messages, Sequence) or isinstance(messages, (str, bytes)):
            return f"a conversation is a list of messages, got {type(messages).__name__}"
        if not messages:
            return "a conversation needs at least one message"
        for number, message in enumerate(messages, 1):
            if not isinstance(message, Mapping) or "role" not in message or "content" not in message:
                return f"message {number} is not a {{'role': ..., 'content': ...}} mapping"
            role, content = message["role"], message["content"]
            if not isinstance(role, str) or role not in ROLE_TOKENS:
                return f"message {number}: unknown role {role!r} (expected {', '.join(ROLES)})"
            if not isinstance(content, str):
                return f"message {number} ({role}): content must be a string, got {type(content).__name__}"
            if role == "system" and number != 1:
                return f"message {number}: a system message may only come first"
        return None

    def validate(self, messages: object) -> None:
        """TinyLMError naming the first problem of `messages` (see `problem`)."""
        problem = self.problem(messages)
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

    def render(self, messages: Sequence[Mapping[str, str]]) -> Rendered:
        """The ids of a whole conversation and its loss mask (1 on assistant contents and their <|end|>)."""
        self.validate(messages)
        ids, mask, n_learn = [self.eot_id], [0], 0
        for message in messages:
            content = self.content_ids(message["content"])
            learn = int(message["role"] == "assistant")
            ids += [self.role_ids[message["role"]], *content, self.end_id]
            mask += [0, *[learn] * len(content), learn]
            n_learn += learn * len(content)
        return Rendered(ids, mask, n_learn)

    def prompt_ids(self, messages: Sequence[Mapping[str, str]]) -> list[int]:
        """The ids to generate the next assistant message from: the conversation, then <|assistant|>."""
        self.validate(messages)
        if messages[-1]["role"] == "assistant":
            raise TinyLMError("a prompt ends with a user or system message, not an assistant one")
        return [*self.render(messages).ids, self.role_ids["assistant"]]

    # ---- the same format for transformers ----------------------------------------------------------
    def jinja_template(self) -> str:
        """The Hugging Face `chat_template` that renders exactly `render` (mask: `{% generation %}`)."""
        eot_text = next(text for text, id_ in self.tokenizer.special_tokens.items() if id_ == self.eot_id)
        return chat_template(eot_text)


def _literal(text: str) -> str:
    """`text` as a Jinja string literal (special-token texts never hold quotes or backslashes)."""
    if "'" in text or "\\" in text:
        raise ValueError(f"cannot quote {text!r} in the chat template")
    return f"'{text}'"


def chat_template(eot_text: str) -> str:
    """The Jinja chat template of the format; each marker written whole, so transformers sees its literal."""
    role = {name: _literal(text) for name, text in ROLE_TOKENS.items()}
    end, roles = _literal(END_OF_TURN), ", ".join(ROLES)
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
        "  {%- else -%}\n"
        "    {{- raise_exception('unknown role ' + message['role'] + ' (expected " + roles + ")') -}}\n"
        "  {%- endif -%}\n"
        "{%- endfor -%}\n"
        "{%- if add_generation_prompt -%}\n"
        "  {{- " + role["assistant"] + " -}}\n"
        "{%- endif -%}"
    )
