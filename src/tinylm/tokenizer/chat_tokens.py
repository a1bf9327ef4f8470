"""The chat tokens: one special token per role and one that ends a turn, reserved or added.

A chat model must tell who is speaking and where a turn ends from ids that no text can forge, so
the markers are special tokens (and so are those of tool results, reasoning and tool calls, the
agent tokens: a tokenizer from before them still chats, and gets them when SFT grows it): `encode`
turns their text into one id, `encode_ordinary` (what the chat renderer uses for message contents)
never does. Every BPE that `tinylm prepare` trains reserves
them next to "<|endoftext|>" (`RESERVED_SPECIALS`); a tokenizer without them (an older run, r50k, an
imported model) gets them from `with_chat_tokens`, appended after its last id, so every existing id
keeps its meaning and a model needs only new rows for the new ids (models/vocab_growth.py).
"""

from __future__ import annotations

import json

from tinylm.errors import TinyLMError
from tinylm.tokenizer.hf_json import EOT, tokenizer_from_hf_json
from tinylm.tokenizer.r50k import MARKER_KEY, r50k_with_added
from tinylm.tokenizer.tokenizer import Tokenizer

ROLE_TOKENS: dict[str, str] = {"system": "<|system|>", "user": "<|user|>", "assistant": "<|assistant|>"}
END_OF_TURN = "<|end|>"
# the agent tokens: a tool result's turn, and the spans of an assistant turn that hold its reasoning and its calls
TOOL_ROLE = "<|tool|>"
THINK, END_THINK = "<|think|>", "<|/think|>"
CALL, END_CALL = "<|call|>", "<|/call|>"
AGENT_TOKENS: tuple[str, ...] = (TOOL_ROLE, THINK, END_THINK, CALL, END_CALL)
CHAT_TOKENS: tuple[str, ...] = (*ROLE_TOKENS.values(), END_OF_TURN, *AGENT_TOKENS)
RESERVED_SPECIALS: tuple[str, ...] = (EOT, *CHAT_TOKENS)  # what a new BPE reserves, in id order


def missing_chat_tokens(tokenizer: Tokenizer) -> list[str]:
    """The chat tokens `tokenizer` does not have as special tokens, in `CHAT_TOKENS` order."""
    return [token for token in CHAT_TOKENS if token not in tokenizer.special_tokens]


def with_chat_tokens(tokenizer: Tokenizer) -> tuple[Tokenizer, list[str]]:
    """`tokenizer` with every chat token (missing ones appended at ids n_vocab, n_vocab + 1, ...), and those added.

    A tokenizer that has them all comes back as it is. The result saves and loads like any tokenizer:
    a tokenizer.json with more added special tokens, or the r50k marker listing them.
    """
    missing = missing_chat_tokens(tokenizer)
    if not missing:
        return tokenizer, []
    taken = [token for token in missing if tokenizer.token_to_id(token) is not None]
    if taken:  # an ordinary token spelled like a chat token cannot become special without changing old ids
        raise TinyLMError(f"tokenizer {tokenizer.name} has {taken[0]!r} as an ordinary token, so it cannot become "
                          "the chat token")

    if MARKER_KEY in json.loads(tokenizer.to_json()):
        return r50k_with_added(tokenizer, missing), missing
    grown = tokenizer_from_hf_json(_with_added_specials(tokenizer.to_json(), missing), "the tokenizer with chat tokens")
    return grown, missing


def _with_added_specials(tokenizer_json: str, tokens: list[str]) -> str:
    """A tokenizer.json with `tokens` appended as special tokens, numbered by `tokenizers` after the last id."""
    from tokenizers import AddedToken
    from tokenizers import Tokenizer as HFTokenizer

    hf = HFTokenizer.from_str(tokenizer_json)
    hf.add_special_tokens([AddedToken(token, special=True, normalized=False) for token in tokens])
    return hf.to_str()
