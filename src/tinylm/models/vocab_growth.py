"""Room for new tokens in a trained model: more embedding (and untied head) rows, set to the mean row.

Adding the chat tokens to a tokenizer that lacked them gives ids the model has never seen. Their
rows must exist (the embedding is indexed by id, the head scores every id) and should start where
they disturb nothing: each new row is the mean of the rows of the tokens the model knows,

    E_new = (1/n) sum_{i<n} E_i        W_new = (1/n) sum_{i<n} W_i        b_new = (1/n) sum_{i<n} b_i

so a new token enters as an "average" token and its logit h . W_new is the average logit, neither
certain nor impossible, instead of a random row whose logit may dominate (Hewitt, "Initializing
new word embeddings for pretrained language models", 2021). Old rows are untouched, so the logits
of old tokens on old inputs do not change. A tied head stays tied (one Parameter for both).

The grown weights are new Parameters registered on the model: build the optimizer afterwards.
"""

from __future__ import annotations

from collections.abc import Sequence

import torch
from torch import nn

from tinylm.config import ModelConfig


def _mean_row(tensor: torch.Tensor, known_rows: int) -> torch.Tensor:
    return tensor[:known_rows].detach().float().mean(dim=0).to(tensor.dtype)


def _grown(param: nn.Parameter, rows: int, fill: torch.Tensor) -> nn.Parameter:
    """A new Parameter: `param`'s rows, then copies of `fill` up to `rows`."""
    extra = fill.expand(rows - param.shape[0], *param.shape[1:])
    return nn.Parameter(torch.cat([param.detach(), extra.to(param.device)]), requires_grad=param.requires_grad)


@torch.no_grad()
def grow_vocab(model: nn.Module, new_vocab_size: int, known_rows: int | None = None) -> ModelConfig:
    """Grow the model (in place) to `new_vocab_size` ids, new rows = the mean of the first `known_rows` rows.

    `known_rows` defaults to every existing row; nothing changes when the model already has enough rows
    (r50k models are padded to 50304 ids and hold a few new tokens in their padding rows). Returns the
    model's new config (also set as `model.config`).
    """
    embed, head = model.token_embed, model.lm_head
    old = embed.weight.shape[0]
    if new_vocab_size <= old:
        return model.config
    known = old if known_rows is None else known_rows
    tied = head.weight is embed.weight
    embed.weight = _grown(embed.weight, new_vocab_size, _mean_row(embed.weight, known))
    embed.num_embeddings = new_vocab_size
    if tied:
        head.weight = embed.weight
    else:
        head.weight = _grown(head.weight, new_vocab_size, _mean_row(head.weight, known))
    if head.bias is not None:
        head.bias = _grown(head.bias, new_vocab_size, _mean_row(head.bias, known))
    head.out_features = new_vocab_size
    model.config = model.config.replace(vocab_size=new_vocab_size)
    return model.config


@torch.no_grad()
def init_token_rows(model: nn.Module, token_ids: Sequence[int], known_rows: int) -> ModelConfig:
    """Make `token_ids` usable: grow the vocabulary if any id lies past it, and set all their rows to the mean.

    The mean is over the first `known_rows` rows (the tokenizer's ids before the new tokens), so padding
    rows a new token takes over are reset too. Returns the model's config.
    """
    embed, head = model.token_embed, model.lm_head
    ids = torch.as_tensor(list(token_ids), dtype=torch.long)
    if len(ids) == 0:
        return model.config
    grow_vocab(model, max(embed.weight.shape[0], int(ids.max()) + 1), known_rows)
    tensors = [embed.weight] + ([head.weight] if head.weight is not embed.weight else [])
    tensors += [head.bias] if head.bias is not None else []
    for tensor in tensors:
        tensor[ids.to(tensor.device)] = _mean_row(tensor, known_rows)
    return model.config
