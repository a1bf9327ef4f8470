"""Tokens as a page draws them: each id with the text and bytes it stands for, special or not.

The tokenizer playground and the data preview both show ids this way. A character split over byte
tokens shows as U+FFFD in each piece, so "bytes" (hex) says exactly what each token holds.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from tinylm.checkpoint.layout import TOKENIZER, list_checkpoints
from tinylm.errors import TinyLMError
from tinylm.studio.runs import StudioError
from tinylm.tokenizer.load import load_tokenizer
from tinylm.tokenizer.tokenizer import Tokenizer


def run_tokenizer(run_dir: Path) -> Tokenizer:
    """The tokenizer of the run's newest checkpoint that has one; StudioError when none does."""
    found = [c / TOKENIZER for c in reversed(list_checkpoints(run_dir)) if (c / TOKENIZER).is_file()]
    if not found:
        raise StudioError(f"{run_dir.name} has no checkpoint with a tokenizer yet", 404)
    try:
        return load_tokenizer(found[0])
    except TinyLMError as exc:
        raise StudioError(str(exc), 409) from None


def token_pieces(tokenizer: Tokenizer, ids: list[int], mask: list[int] | None = None) -> list[dict[str, Any]]:
    """{"id", "text", "bytes", "special"} per id, and "learn" (0/1) when a loss mask comes with them."""
    names = {j: t for t, j in tokenizer.special_tokens.items()}
    pieces = [names[i].encode() if i in names else tokenizer.token_bytes(i) for i in ids]
    shown = [{"id": i, "text": piece.decode("utf-8", errors="replace"), "bytes": piece.hex(), "special": i in names}
             for i, piece in zip(ids, pieces, strict=True)]
    if mask is not None:
        for token, learn in zip(shown, mask, strict=True):
            token["learn"] = int(learn)
    return shown


def tokenize_with_run(run_dir: Path, text: str) -> dict[str, Any]:
    """The run's tokenizer on `text` (special tokens in the text count as special)."""
    tokenizer = run_tokenizer(run_dir)
    ids = tokenizer.encode(text)
    return {"tokenizer": tokenizer.name, "ids": ids, "tokens": token_pieces(tokenizer, ids)}
