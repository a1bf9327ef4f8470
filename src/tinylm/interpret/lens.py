"""The logit lens (nostalgebraist, 2020): read the residual stream after every block as if it were the last.

    lens_l = softmax(head(final_norm(x_l)))          x_l: the stream after block l

Each block adds to one residual stream, and the final norm and head turn whatever is in it into next-token
probabilities, so reading the stream early shows when the model's guess forms. After the last block the
lens is the model's own output exactly (tests/test_inspect.py checks it).
"""

from __future__ import annotations

from typing import Any

import torch

from tinylm.interpret.loading import Inspected, as_batch
from tinylm.models.hooks.residual import record_residual
from tinylm.models.hooks.sites import final_norm


@torch.no_grad()
def lens_logits(inspected: Inspected, ids: list[int]) -> torch.Tensor:
    """[n_blocks, T, vocab]: every block's output through the final norm and head."""
    model = inspected.model
    with record_residual(model) as stream:
        model(as_batch(ids))
    blocks = torch.cat(stream[1:])  # [n_blocks, T, C]: the embedding alone is left out
    return model.logits(final_norm(model)(blocks)).float()


def logit_lens(inspected: Inspected, ids: list[int], top_k: int = 5, target: int | None = None) -> dict[str, Any]:
    """{"ids", "tokens", "lens": L[layer][position] = {"ids": top-k, "probs"}, and for a target token its
    "rank" (0 = the top guess) and "prob" at every layer and position}."""
    probs = torch.softmax(lens_logits(inspected, ids), dim=-1)
    top = probs.topk(min(top_k, probs.shape[-1]), dim=-1)
    out: dict[str, Any] = {
        "ids": ids, "tokens": inspected.labels(ids),
        "lens": [[{"ids": top.indices[layer, pos].tolist(), "probs": top.values[layer, pos].tolist(),
                   "tokens": inspected.labels(top.indices[layer, pos].tolist())}
                  for pos in range(len(ids))] for layer in range(probs.shape[0])],
    }
    if target is not None:
        p = probs[..., target]  # [layers, T]
        rank = (probs > p[..., None]).sum(dim=-1)
        out["target"] = {"id": target, "token": inspected.label(target), "prob": p.tolist(), "rank": rank.tolist()}
    return out
