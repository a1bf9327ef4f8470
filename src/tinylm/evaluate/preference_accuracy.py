"""Preference accuracy: how often a model gives a held-out pair's verified answer more probability.

For a pair (prompt, chosen, rejected), the model prefers `chosen` when

    log p(chosen <|end|> | prompt)  >  log p(rejected <|end|> | prompt)

(sums over the answer's tokens and the end-of-turn token, the prompt rendered by the chat format up to
the assistant header). This needs no reference model, so the same number is read off the base, SFT,
DPO and RL models of one pipeline; DPO's own logged accuracy compares implicit rewards against its
reference instead.
"""

from __future__ import annotations

from collections.abc import Sequence

from torch import nn

from tinylm.evaluate.loglikelihood import score_continuations
from tinylm.tasks.preference_pairs import PreferencePair
from tinylm.tokenizer.chat_format import ChatFormat


def preference_accuracy(model: nn.Module, chat: ChatFormat, pairs: Sequence[PreferencePair],
                        batch_size: int = 32) -> float:
    """The share of pairs whose chosen answer the model finds likelier than the rejected one."""
    if not pairs:
        return 0.0
    requests = []
    for pair in pairs:
        prompt = chat.prompt_ids(pair.example.prompt)
        for answer in (pair.chosen, pair.rejected):
            requests.append((prompt, [*chat.content_ids(answer), chat.end_id]))
    scores = score_continuations(model, requests, batch_size)
    wins = sum(scores[2 * i].logprob > scores[2 * i + 1].logprob for i in range(len(pairs)))
    return wins / len(pairs)
