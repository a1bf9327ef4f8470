"""Preference rows as tensors: each side is the prompt then its answer, right-padded to a fixed width.

    chosen:   <|endoftext|> <|user|> What is 4 + 5? <|end|> <|assistant|> 9 <|end|>  pad pad ...
    rejected: <|endoftext|> <|user|> What is 4 + 5? <|end|> <|assistant|> 8 <|end|>  pad pad ...
    mask:     0 ...                                                        1  1     0 ...

The mask is 1 on the answer's tokens and the <|end|> that closes it (what the policy is judged on).
When a side does not fit `width` tokens, the shared prompt is cut from the left, by the same amount
on both sides, so both answers stay whole and still see the same (most recent) context; a pair whose
longer answer alone does not fit is dropped and counted. An unpaired (KTO) row repeats its one side
in the other slot with `*_present` 0, so every batch has the same shape.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import torch

from tinylm.stages.preference.data import PreferenceRow
from tinylm.tokenizer.chat_format import ChatFormat

SIDES = ("chosen", "rejected")


@dataclass
class EncodedPairs:
    """`tensors`: {side}_ids / {side}_mask [N, width], {side}_length / {side}_present [N]; and what was cut."""

    tensors: dict[str, torch.Tensor]
    truncated: int  # pairs whose prompt lost its oldest tokens
    dropped: int  # pairs whose answer alone is longer than a row

    def __len__(self) -> int:
        return len(self.tensors["chosen_ids"]) if self.tensors else 0


def answer_ids(chat: ChatFormat, text: str) -> list[int]:
    return [*chat.content_ids(text), chat.end_id]


def encode_pairs(rows: Sequence[PreferenceRow], chat: ChatFormat, width: int) -> EncodedPairs:
    """Rows of `width` tokens per side (the budget of one forward: seq_len + 1 for next-token log-probs)."""
    ids: dict[str, list[list[int]]] = {side: [] for side in SIDES}
    masks: dict[str, list[list[int]]] = {side: [] for side in SIDES}
    present: dict[str, list[float]] = {side: [] for side in SIDES}
    lengths: dict[str, list[int]] = {side: [] for side in SIDES}
    truncated = dropped = 0
    for row in rows:
        prompt = chat.prompt_ids(list(row.prompt))
        texts = {"chosen": row.chosen, "rejected": row.rejected}
        answers = {side: answer_ids(chat, text) for side, text in texts.items() if text is not None}
        longest = max(len(a) for a in answers.values())
        room = width - longest
        if room < 1:
            dropped += 1
            continue
        if len(prompt) > room:
            prompt = prompt[-room:]
            truncated += 1
        for side in SIDES:
            answer = answers.get(side) or next(iter(answers.values()))
            pad = width - len(prompt) - len(answer)
            ids[side].append([*prompt, *answer] + [chat.eot_id] * pad)
            masks[side].append([0] * len(prompt) + [1] * len(answer) + [0] * pad)
            present[side].append(float(side in answers))
            lengths[side].append(len(prompt) + len(answer))
    if not ids["chosen"]:
        return EncodedPairs({}, truncated, dropped)
    tensors: dict[str, torch.Tensor] = {}
    for side in SIDES:
        tensors[f"{side}_ids"] = torch.tensor(ids[side], dtype=torch.long)
        tensors[f"{side}_mask"] = torch.tensor(masks[side], dtype=torch.long)
        tensors[f"{side}_length"] = torch.tensor(lengths[side], dtype=torch.long)  # real tokens, <|end|> last
        tensors[f"{side}_present"] = torch.tensor(present[side])
    return EncodedPairs(tensors, truncated, dropped)
