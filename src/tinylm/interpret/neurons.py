"""What an MLP neuron responds to, and which tokens the embedding puts side by side.

A neuron is one hidden unit of a block's MLP (the input of its down projection). Its top-activating
windows are the places in the run's dev split where it fires hardest, shown with the tokens around
them and each token's activation, so a learner can guess what it detects ("after `def`", "inside a
string"). A token's neighbours are the tokens whose embedding rows point the same way (cosine).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import torch
import torch.nn.functional as F

from tinylm.errors import TinyLMError
from tinylm.interpret.loading import DEV_WINDOWS, Inspected, dev_batches
from tinylm.models.hooks.neurons import record_neurons
from tinylm.models.hooks.sites import layer_sites

BEFORE, AFTER = 12, 3  # tokens of context shown around an activation


def neuron_count(inspected: Inspected, layer: int) -> int:
    n_blocks = inspected.model.config.n_blocks
    if not 0 <= layer < n_blocks:
        raise TinyLMError(f"--layer {layer} is out of range: this model has layers 0 to {n_blocks - 1}")
    down = layer_sites(inspected.model)[layer].mlp_down
    if down is None:
        raise TinyLMError(f"layer {layer}'s MLP is a mixture of experts: each token sees other experts, so its "
                          "neurons are not one set to rank")
    return down.in_features


@torch.no_grad()
def top_activations(inspected: Inspected, layer: int, neuron: int | None, data_dir: str | Path | None = None,
                    windows: int = DEV_WINDOWS, top: int = 10, direction: list[float] | None = None) -> dict[str, Any]:
    """{"layer", "neuron", "data", "examples": [{"activation", "tokens", "ids", "activations", "at"}]}: the
    `top` strongest activations of the neuron (or of the projection on `direction`, one weight per neuron)
    over the first `windows` context-long dev windows."""
    width = neuron_count(inspected, layer)
    if direction is not None:
        if len(direction) != width:
            raise TinyLMError(f"--direction has {len(direction)} numbers: layer {layer}'s MLP has {width} neurons")
        weights = torch.tensor(direction)
    elif not 0 <= neuron < width:
        raise TinyLMError(f"--neuron {neuron} is out of range: layer {layer}'s MLP has neurons 0 to {width - 1}")
    model = inspected.model
    seq_len = model.config.context_length
    data, batches = dev_batches(inspected, data_dir, windows, "inspect neurons")
    ids_all, acts_all = [], []
    with record_neurons(model, layer) as kept:
        for x, _ in batches:
            model(x)
            ids_all.append(x)
            acts_all.append(kept[0].float() @ weights if direction is not None else kept[0][..., neuron].float())
    ids, acts = torch.cat(ids_all), torch.cat(acts_all)  # [N, T]
    best = acts.flatten().topk(min(top, acts.numel())).indices
    examples = []
    for flat in best.tolist():
        row, at = divmod(flat, seq_len)
        lo, hi = max(0, at - BEFORE), min(seq_len, at + AFTER + 1)
        window = ids[row, lo:hi].tolist()
        examples.append({"activation": float(acts[row, at]), "ids": window, "tokens": inspected.labels(window),
                         "activations": acts[row, lo:hi].tolist(), "at": at - lo})
    return {"layer": layer, "neuron": neuron, "data": str(data), "windows": int(ids.shape[0]), "examples": examples}


@torch.no_grad()
def embedding_neighbours(inspected: Inspected, token: int, top: int = 10) -> dict[str, Any]:
    """{"token", "neighbours": [{"id", "token", "cosine"}]}: the tokens whose embeddings are nearest by cosine."""
    table = inspected.model.token_embed.weight.float()
    n_vocab = inspected.tokenizer.n_vocab  # rows past it are padding that no text produces
    similarity = F.cosine_similarity(table[:n_vocab], table[token][None], dim=-1)
    similarity[token] = -2.0
    best = similarity.topk(min(top, n_vocab - 1))
    return {"token": {"id": token, "token": inspected.label(token)},
            "neighbours": [{"id": i, "token": inspected.label(i), "cosine": float(c)}
                           for i, c in zip(best.indices.tolist(), best.values.tolist())]}
