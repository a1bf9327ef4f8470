"""A conversation longer than a training row, split into rows at turn boundaries instead of cut after the first.

Packing keeps the first seq_len + 1 tokens of an example and drops the rest (`packing.py`), which
for a long multi-turn conversation threw away most of its assistant turns. Here such a
conversation becomes several examples, each of them

- the head: the start token and the system prompt, when there is one, repeated in every piece;
- then whole turns, starting at a turn boundary and ending with an assistant turn (a trailing
  question teaches nothing), as many as fit, greedily from the first turn not yet trained;
- with the conversation's own loss mask, so the loss stays on assistant tokens, and each
  assistant turn is trained in exactly one piece.

So every assistant turn that fits a row beside the head is trained on. When an answer does not
fit beside its question, the earlier prompt turns are left out (`left_out`) and the answer trains
with what fits; a single turn longer than a row is cut at the row's end, keeping its question
when that takes at most half the row (`cut`, and the assistant tokens lost in `dropped_tokens`).
A head that leaves no room for a turn (a system prompt as long as the row) falls back to the
plain cut of the whole conversation.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from tinylm.data.packing import Example
from tinylm.tokenizer.chat_format import ChatFormat


@dataclass
class TurnWindows:
    """The pieces of one conversation and what did not fit."""

    examples: list[Example] = field(default_factory=list)
    cut: int = 0  # turns longer than a row, cut at its end
    dropped_tokens: int = 0  # assistant tokens (mask 1) that no piece holds
    left_out: int = 0  # prompt turns that did not fit beside their answer

    def add(self, other: TurnWindows) -> None:
        self.examples += other.examples
        self.cut += other.cut
        self.dropped_tokens += other.dropped_tokens
        self.left_out += other.left_out


def _joined(head: Example, turns: Sequence[Example]) -> tuple[list[int], list[int]]:
    ids, mask = list(head[0]), list(head[1])
    for turn_ids, turn_mask in turns:
        ids += turn_ids
        mask += turn_mask
    return ids, mask


def _cut(head: Example, turns: Sequence[Example], limit: int) -> tuple[Example, int]:
    """(head and turns cut to `limit` tokens, the learned tokens the cut dropped)."""
    ids, mask = _joined(head, turns)
    return (ids[:limit], mask[:limit]), sum(mask[limit:])


def turn_windows(head: Example, turns: Sequence[Example], seq_len: int) -> TurnWindows:
    """`head + turns` as pieces of at most seq_len + 1 tokens, split at turn boundaries by the rule above."""
    limit = seq_len + 1
    size = [len(ids) for ids, _ in turns]
    if len(head[0]) + sum(size) <= limit:
        return TurnWindows([_joined(head, turns)])
    if len(head[0]) + 2 > limit:  # not even a role marker and one token beside the head
        piece, dropped = _cut(head, turns, limit)
        return TurnWindows([piece], cut=1, dropped_tokens=dropped)
    learns = [any(mask) for _, mask in turns]
    out, i = TurnWindows(), 0
    while (answer := next((k for k in range(i, len(turns)) if learns[k]), None)) is not None:
        start = next((s for s in range(i, answer + 1) if len(head[0]) + sum(size[s:answer + 1]) <= limit), None)
        if start is None:  # the answer alone is longer than a row: cut it, after its question if that is short
            start = answer - 1 if answer > i and len(head[0]) + size[answer - 1] <= limit // 2 else answer
            piece, dropped = _cut(head, turns[start:answer + 1], limit)
            out.add(TurnWindows([piece], cut=1, dropped_tokens=dropped, left_out=start - i))
            i = answer + 1
            continue
        end, length = answer + 1, len(head[0]) + sum(size[start:answer + 1])
        for k in range(answer + 1, len(turns)):
            if length + size[k] > limit:
                break
            length += size[k]
            end = k + 1 if learns[k] else end
        out.add(TurnWindows([_joined(head, turns[start:end])], left_out=start - i))
        i = end
    return out


def conversation_windows(chat: ChatFormat, messages: Sequence[Mapping[str, Any]], seq_len: int,
                         learn_reasoning: bool = True) -> TurnWindows:
    """A conversation rendered by `chat` as pieces of at most seq_len + 1 tokens (whole when it fits)."""
    rendered = chat.render(messages, learn_reasoning=learn_reasoning)
    if len(rendered.ids) <= seq_len + 1:
        return TurnWindows([(rendered.ids, rendered.mask)])
    # each the start token, then that one turn
    pieces = [chat.render([message], learn_reasoning=learn_reasoning, check=False) for message in messages]
    turns: list[Example] = [(piece.ids[1:], piece.mask[1:]) for piece in pieces]
    if messages[0]["role"] == "system":  # repeated at the head of every piece
        return turn_windows((pieces[0].ids, pieces[0].mask), turns[1:], seq_len)
    return turn_windows((pieces[0].ids[:1], pieces[0].mask[:1]), turns, seq_len)
