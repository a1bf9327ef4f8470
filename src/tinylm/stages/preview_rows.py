"""What a stage would train on, before it does: its first rows as ids with the loss mask on each.

Each stage reads its data with its own loader and renders it its own way; its preview (the `preview` of its
row in the stage table) calls that same code, so the rows, the mask and a bad row's "FILE:LINE: reason" are
exactly what the command meets. The studio's data page draws them (studio/data_preview.py).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from tinylm.errors import TinyLMError
from tinylm.tasks.registry import PREFIX as BUILTIN_PREFIX
from tinylm.tokenizer.chat_format import ChatFormat
from tinylm.tokenizer.chat_tokens import with_chat_tokens
from tinylm.tokenizer.tokenizer import Tokenizer


@dataclass
class PreviewRow:
    label: str
    ids: list[int]
    mask: list[int]  # 1 where the stage's loss learns the token
    extra: dict[str, Any] = field(default_factory=dict)  # shown beside the row (RL: the reference answer)


@dataclass
class DataPreview:
    tokenizer: Tokenizer  # what the ids are in
    rows: list[PreviewRow]
    notes: list[str]


def chat_for(tokenizer: Tokenizer | None, notes: list[str]) -> ChatFormat:
    """The chat format the stage would use: the base's tokenizer with the chat tokens added if it lacks them."""
    if tokenizer is None:
        raise TinyLMError("this stage renders rows with its base's tokenizer: choose the run it would start from")
    with_chat, added = with_chat_tokens(tokenizer)
    if added:
        notes.append(f"the chat token(s) {', '.join(added)} added to {tokenizer.name}, as the stage adds them")
    return ChatFormat.from_tokenizer(with_chat)


def generated_limit(spec: str, limit: int) -> int | None:
    """The loader's limit: a built-in set is generated only `limit` rows long; a file is loaded whole (its split
    and its skipped rows are the file's), and the preview shows its first `limit` rows."""
    return limit if spec.startswith(BUILTIN_PREFIX) else None


def with_loading_notes(notes: list[str], loaded: Any) -> list[str]:
    """The preview's notes, then the loader's, then each skipped row."""
    return [*notes, *loaded.notes, *(f"skipped {s}" for s in loaded.skipped)]
