"""Answer log-probs of both sides of a batch of pairs from one forward pass.

Every preference loss reads log pi(y|x) = sum over the answer's tokens t of log p(y_t | x, y_<t). The
chosen and rejected rows are stacked into one batch of 2N rows and go through the model once (one
forward, one backward, and under DDP one gradient reduction), rather than two passes:

    ids [2N, W] = cat(chosen_ids, rejected_ids)   ->  logits of ids[:, :-1]  ->  log p of ids[:, 1:]

and the per-token log-probs are summed under the answer mask (shifted by one, as the targets are).
Columns past the longest row of the batch hold only padding and are cut first. The forward goes
through `model(...)` itself, not a method of it, so a DDP-wrapped policy reduces its gradients.
"""

from __future__ import annotations

import torch
from torch import nn


def token_logprobs(model: nn.Module, ids: torch.Tensor) -> torch.Tensor:
    """log p(ids[:, t+1] | ids[:, :t+1]) for every position, [B, W-1], in float32."""
    logits, _ = model(ids[:, :-1])
    return torch.log_softmax(logits.float(), dim=-1).gather(-1, ids[:, 1:, None]).squeeze(-1)


def answer_logprobs(model: nn.Module, ids: torch.Tensor, mask: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """(summed log-probs of the masked tokens [B], their counts [B]) for rows ids/mask [B, W]."""
    used = max(2, int(mask.nonzero()[:, 1].max()) + 1 if mask.any() else 2)  # columns up to the last answer token
    ids, mask = ids[:, :used], mask[:, :used]
    learn = mask[:, 1:].to(torch.float32)
    return (token_logprobs(model, ids) * learn).sum(-1), learn.sum(-1)


def pair_logprobs(model: nn.Module, batch: dict[str, torch.Tensor]
                  ) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor]:
    """(chosen sums, rejected sums, chosen counts, rejected counts), each [N], from one concatenated forward."""
    n = len(batch["chosen_ids"])
    ids = torch.cat([batch["chosen_ids"], batch["rejected_ids"]])
    mask = torch.cat([batch["chosen_mask"], batch["rejected_mask"]])
    sums, counts = answer_logprobs(model, ids, mask)
    return sums[:n], sums[n:], counts[:n], counts[n:]
