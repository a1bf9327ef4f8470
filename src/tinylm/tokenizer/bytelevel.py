"""GPT-2's byte <-> printable-character table, the alphabet of every byte-level BPE.

A byte-level BPE works on raw UTF-8 bytes, so it can encode any string and never needs an
unknown token. JSON vocabularies (GPT-2's encoder.json, Hugging Face tokenizer.json) must store
tokens as text, so each of the 256 bytes is given a visible character: printable Latin-1 bytes
stand for themselves, the other 68 (control characters, space, a few Latin-1 gaps) are shifted to
U+0100 and up, in byte order. A space becomes "Ġ", a newline "Ċ". This module converts between
the two views; tiktoken wants the raw bytes, tokenizer.json holds the characters.
"""

from __future__ import annotations


def _byte_to_char() -> dict[int, str]:
    """The GPT-2 table: visible bytes map to themselves, the rest to U+0100, U+0101, ... in byte order."""
    visible = [*range(ord("!"), ord("~") + 1), *range(ord("¡"), ord("¬") + 1), *range(ord("®"), ord("ÿ") + 1)]
    table = {b: chr(b) for b in visible}
    shifted = 0
    for b in range(256):
        if b not in table:
            table[b] = chr(256 + shifted)
            shifted += 1
    return table


BYTE_TO_CHAR: dict[int, str] = _byte_to_char()
CHAR_TO_BYTE: dict[str, int] = {char: byte for byte, char in BYTE_TO_CHAR.items()}


def token_to_bytes(token: str) -> bytes:
    """The raw bytes a byte-level vocabulary entry stands for; KeyError if it is not byte-level text."""
    return bytes(CHAR_TO_BYTE[char] for char in token)


def bytes_to_token(data: bytes) -> str:
    """The vocabulary spelling of raw bytes (inverse of `token_to_bytes`)."""
    return "".join(BYTE_TO_CHAR[b] for b in data)
