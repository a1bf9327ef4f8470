"""Token ids -> text pieces as they arrive, never printing half of a UTF-8 character.

A byte-level tokenizer may split one character across tokens: "é" is the two bytes C3 A9, and an
emoji is four. Decoding each token on its own would print replacement characters (U+FFFD) in the
middle of correct text. Instead the token's raw bytes go into an incremental UTF-8 decoder
(`codecs`), which holds back an incomplete character until its last byte arrives.

Tokenizers without `token_bytes` fall back to decoding the whole sequence so far and printing what is
new, holding back a trailing U+FFFD (an unfinished character) until the next token completes it.
"""

from __future__ import annotations

import codecs
from typing import Any


class TextStream:
    def __init__(self, tokenizer: Any) -> None:
        self.tokenizer = tokenizer
        self.by_bytes = hasattr(tokenizer, "token_bytes")
        self.decoder = codecs.getincrementaldecoder("utf-8")(errors="replace")
        self.ids: list[int] = []
        self.emitted = 0  # characters of the fallback decode already returned

    def push(self, token_id: int) -> str:
        """The text that token_id completes (possibly empty)."""
        if self.by_bytes:
            return self.decoder.decode(self.tokenizer.token_bytes(int(token_id)))
        self.ids.append(int(token_id))
        text = self.tokenizer.decode(self.ids)
        ready = len(text.rstrip("\ufffd"))
        piece, self.emitted = text[self.emitted : ready], max(self.emitted, ready)
        return piece

    def flush(self) -> str:
        """Whatever is still held back (an unfinished character becomes U+FFFD)."""
        if self.by_bytes:
            return self.decoder.decode(b"", final=True)
        text = self.tokenizer.decode(self.ids) if self.ids else ""
        piece, self.emitted = text[self.emitted :], len(text)
        return piece
