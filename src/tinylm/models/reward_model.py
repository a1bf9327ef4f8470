"""A reward model: the language model's final hidden state at the last real token, through one scalar head.

    r(x, y) = w . h_T(x, y),    h_T = final-norm hidden state of the last token of prompt + answer (<|end|>)

trained on pairs with the Bradley-Terry model of preferences, P(y_w > y_l | x) = sigmoid(r_w - r_l):

    L = -log sigmoid(r(x, y_w) - r(x, y_l) - m)        (m >= 0 an optional margin, 0 by default)

The head is `score` [1, n_embed] without bias, the layer `transformers`' *ForSequenceClassification
models have, so an exported reward model scores exactly as ours (interop/hf_reward_export.py). The
language-model head is not used; when it is not tied to the embedding it is frozen, so it neither
trains nor leaves DDP waiting for a gradient that never comes.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import nn

from tinylm.config import ModelConfig

BACKBONE = "backbone."  # where a reward checkpoint keeps the language model's weights (read: checkpoint/load.py)


class RewardModel(nn.Module):
    """A backbone (either architecture) and a scalar head; `forward(ids, lengths)` -> scores [B]."""

    def __init__(self, backbone: nn.Module) -> None:
        super().__init__()
        self.backbone = backbone
        config: ModelConfig = backbone.config
        self.score = nn.Linear(config.n_embed, 1, bias=False)
        nn.init.normal_(self.score.weight, std=config.init_std)
        head, embedding = backbone.lm_head, getattr(backbone, "token_embed", None)
        if embedding is None or head.weight is not embedding.weight:
            head.requires_grad_(False)

    @property
    def config(self) -> ModelConfig:
        return self.backbone.config

    def forward(self, ids: torch.Tensor, lengths: torch.Tensor) -> torch.Tensor:
        """Scores of right-padded rows ids [B, T] whose real tokens are the first `lengths` [B]."""
        hidden = self.backbone.forward_hidden(ids)
        last = hidden[torch.arange(len(ids), device=ids.device), lengths - 1]
        return self.score(last).squeeze(-1).float()

    def num_params(self, non_embedding: bool = False, active: bool = False) -> int:
        return self.backbone.num_params(non_embedding, active) + self.score.weight.numel()

    def flops_per_token(self, seq_len: int | None = None) -> int:
        return self.backbone.flops_per_token(seq_len)


def bradley_terry_loss(chosen: torch.Tensor, rejected: torch.Tensor, margin: float | torch.Tensor = 0.0
                       ) -> torch.Tensor:
    """Per-pair -log sigmoid(r_w - r_l - m): the negative log-likelihood of the preference under Bradley-Terry."""
    return -F.logsigmoid(chosen - rejected - margin)


def pair_scores(model: nn.Module, batch: dict[str, torch.Tensor]) -> tuple[torch.Tensor, torch.Tensor]:
    """(chosen scores, rejected scores) [N] from one forward over the stacked sides, cut to the longest row."""
    n = len(batch["chosen_ids"])
    lengths = torch.cat([batch["chosen_length"], batch["rejected_length"]])
    ids = torch.cat([batch["chosen_ids"], batch["rejected_ids"]])[:, :int(lengths.max())]
    scores = model(ids, lengths)
    return scores[:n], scores[n:]
