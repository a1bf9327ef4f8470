"""RL's preview: the task's prompts (get_task); nothing is learned from a prompt itself (mask 0); the reference
answer the verifier checks is shown beside it."""

from __future__ import annotations

from tinylm.stages.preview_rows import DataPreview, PreviewRow, chat_for
from tinylm.stages.rl.config import RLConfig
from tinylm.tasks.registry import get_task
from tinylm.tokenizer.tokenizer import Tokenizer


def prompt_preview(spec: str, tokenizer: Tokenizer | None, limit: int, seed: int) -> DataPreview:
    notes = ["RL learns from the replies it samples: a prompt's own tokens carry no loss"]
    chat = chat_for(tokenizer, notes)
    task = get_task(RLConfig(base="-", task=spec).task_spec())  # a bare FILE.jsonl is a file of prompts, as in rl
    examples = task.examples("train", limit, seed)
    notes += task.notes  # the row reader's, on a prompt file's bytes
    rows = [PreviewRow(f"prompt {number}", ids, [0] * len(ids), {"answer": example.answer})
            for number, example in enumerate(examples[:limit], 1)
            for ids in [chat.prompt_ids(example.prompt)]]
    return DataPreview(chat.tokenizer, rows, notes)
