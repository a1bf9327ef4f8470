"""The preview of the pair stages (DPO, reward): preference rows (load_preferences), the prompt then each answer;
the mask on the answer."""

from __future__ import annotations

from tinylm.stages.preference.data import load_preferences
from tinylm.stages.preference.pair_rows import answer_ids
from tinylm.stages.preview_rows import DataPreview, PreviewRow, chat_for, generated_limit, with_loading_notes
from tinylm.tokenizer.tokenizer import Tokenizer


def pair_preview(spec: str, tokenizer: Tokenizer | None, limit: int, seed: int) -> DataPreview:
    notes: list[str] = []
    chat = chat_for(tokenizer, notes)
    loaded = load_preferences(spec, "train", seed=seed, limit=generated_limit(spec, limit))
    rows = []
    for number, pair in enumerate(loaded.rows[:limit], 1):
        prompt = chat.prompt_ids(list(pair.prompt))
        for side, text in (("chosen", pair.chosen), ("rejected", pair.rejected)):
            if text is not None:
                answer = answer_ids(chat, text)
                rows.append(PreviewRow(f"pair {number} {side}", prompt + answer, [0] * len(prompt) + [1] * len(answer)))
    return DataPreview(chat.tokenizer, rows, with_loading_notes(notes, loaded))
