"""SFT's preview: conversations (load_conversations) rendered by the chat format; the mask is 1 on the
assistant's content and the <|end|> closing it."""

from __future__ import annotations

from tinylm.stages.preview_rows import DataPreview, PreviewRow, chat_for, generated_limit, with_loading_notes
from tinylm.stages.sft.data import load_conversations
from tinylm.tokenizer.tokenizer import Tokenizer


def conversation_preview(spec: str, tokenizer: Tokenizer | None, limit: int, seed: int) -> DataPreview:
    notes: list[str] = []
    chat = chat_for(tokenizer, notes)
    loaded = load_conversations(spec, "train", seed=seed, limit=generated_limit(spec, limit))
    rows = []
    for number, messages in enumerate(loaded.conversations[:limit], 1):
        rendered = chat.render(messages)
        rows.append(PreviewRow(f"conversation {number}", rendered.ids, rendered.mask))
    return DataPreview(chat.tokenizer, rows, with_loading_notes(notes, loaded))
