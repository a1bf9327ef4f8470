"""Log-probs in OpenAI's two shapes: the legacy lists of /v1/completions and chat's list of entries.

Completions carry log-probs the legacy way (parallel lists `tokens`, `token_logprobs`,
`top_logprobs`, `text_offset`; with `echo` the prompt's tokens come first and the very first one has
no log-prob, as it has no context); chat carries a list of {token, logprob, bytes, top_logprobs}.
A token that is only part of a UTF-8 character is written "bytes:\\xe6\\xbc" (OpenAI's own convention),
so distinct tokens never share a name in `top_logprobs`; chat's `bytes` field is exact anyway.
With `return_tokens_as_token_ids` (vLLM's field) every token is named "token_id:N" instead, so a
client (an RL trainer) reads back the exact ids it was sampled as.
"""

from __future__ import annotations

import codecs
from typing import Any

from tinylm.serve.events import PromptLogprobs, Token


def token_text(tokenizer: Any, token_id: int, as_ids: bool = False) -> str:
    if as_ids:
        return f"token_id:{token_id}"
    data = tokenizer.token_bytes(token_id)
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError:
        return "bytes:" + "".join(f"\\x{b:02x}" for b in data)


class CompletionLogprobs:
    """The legacy log-probs object, built up piece by piece (prompt first when echoing)."""

    def __init__(self, tokenizer: Any, as_ids: bool = False) -> None:
        self.tokenizer, self.as_ids = tokenizer, as_ids
        self.body: dict[str, list] = {"tokens": [], "token_logprobs": [], "top_logprobs": [], "text_offset": []}

    def add_prompt(self, prompt: list[int], scored: PromptLogprobs | None) -> None:
        decoder, offset = codecs.getincrementaldecoder("utf-8")(errors="replace"), 0
        for i, token in enumerate(prompt):
            logprob = None if i == 0 or scored is None else scored.logprobs[i - 1]
            top = None if i == 0 or scored is None else self._top(scored.top[i - 1])
            self._append(token_text(self.tokenizer, token, self.as_ids), logprob, top, offset)
            offset += len(decoder.decode(self.tokenizer.token_bytes(token)))

    def add_tokens(self, tokens: list[Token], offsets: list[int], base: int) -> None:
        for token, offset in zip(tokens, offsets, strict=True):
            name = token_text(self.tokenizer, token.id, self.as_ids)
            self._append(name, token.logprob, self._top(token.top), base + offset)

    def _append(self, text: str, logprob: float | None, top: dict | None, offset: int) -> None:
        self.body["tokens"].append(text)
        self.body["token_logprobs"].append(logprob)
        self.body["top_logprobs"].append(top)
        self.body["text_offset"].append(offset)

    def _top(self, top: tuple[tuple[int, float], ...]) -> dict[str, float]:
        return {token_text(self.tokenizer, i, self.as_ids): lp for i, lp in top}


def chat_logprobs(tokenizer: Any, tokens: list[Token], as_ids: bool = False) -> dict[str, list]:
    def entry(token_id: int, logprob: float) -> dict[str, Any]:
        return {"token": token_text(tokenizer, token_id, as_ids), "logprob": logprob,
                "bytes": list(tokenizer.token_bytes(token_id))}

    return {"content": [{**entry(t.id, t.logprob), "top_logprobs": [entry(i, lp) for i, lp in t.top]}
                        for t in tokens]}
