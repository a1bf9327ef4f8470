"""Direct logit attribution: a logit split into what the embedding, each head and each MLP wrote.

The final residual stream is a sum, x = embedding + sum over layers (sum over heads of head writes
+ attention bias + MLP output). The head reads norm(x) · u, u the target's row of the unembedding
(or the difference of two rows, for a logit difference). Freezing the norm's scale at its value for
this x makes it linear, so the logit splits exactly:

    RMSNorm:   norm(x) = x · r · w,                     r = 1 / sqrt(mean(x²) + eps)
               part(c) = (c ⊙ w) · u · r
    LayerNorm: norm(x) = (x - mean(x)) · r · γ + β,     r = 1 / sqrt(var(x) + eps)
               part(c) = ((c - mean(c)) ⊙ γ) · u · r,    plus β · u and the head's bias as "bias"

The parts add up to the logit; `residual_error` says by how much they miss the model's own (float32)
value. With a logit soft cap the split is of the logit before the cap (the cap is not linear).
"""

from __future__ import annotations

from typing import Any

import torch

from tinylm.errors import TinyLMError
from tinylm.interpret.loading import Inspected, as_batch
from tinylm.models.hooks.head_outputs import head_writes, record_head_outputs
from tinylm.models.hooks.mlp_outputs import record_mlp_outputs
from tinylm.models.hooks.residual import record_residual
from tinylm.models.hooks.sites import final_norm, layer_sites


@torch.no_grad()
def logit_attribution(inspected: Inspected, ids: list[int], target: int | None = None, versus: int | None = None,
                      position: int = -1) -> dict[str, Any]:
    """{"logit": the model's (pre-cap) logit of target (minus versus's), "parts": [{"name", "value"}...],
    "sum", "residual_error"} at `position` (default: the last). `target` None: the model's top guess there."""
    model = inspected.model
    T = len(ids)
    if not -T <= position < T:
        raise TinyLMError(f"--position {position} is out of range for a prompt of {T} tokens")
    pos = position % T
    with record_residual(model) as stream, record_head_outputs(model) as heads, record_mlp_outputs(model) as mlps:
        model(as_batch(ids))
    names: list[str] = []
    parts: list[torch.Tensor] = []

    def add(name: str, value: torch.Tensor) -> None:
        names.append(name)
        parts.append(value.double())

    embedding = stream[0][0, pos]
    if hasattr(model, "pos_embed"):  # classic: tokens and learned positions are two parts
        add("token embedding", model.token_embed.weight[ids[pos]])
        add("position embedding", embedding.double() - model.token_embed.weight[ids[pos]].double())
    else:
        add("embedding", embedding)
    for layer, site in enumerate(layer_sites(model)):
        writes = head_writes(site, heads[layer][:, pos : pos + 1])[0, 0]  # [H, C]
        for head in range(site.n_head):
            add(f"L{layer}H{head}", writes[head])
        if site.o_proj.bias is not None:
            add(f"L{layer} attention bias", site.o_proj.bias)
        add(f"L{layer} MLP", mlps[layer][0, pos])
    components = torch.stack(parts)  # [K, C]
    x = stream[-1][0, pos].double()
    head, norm = model.lm_head, final_norm(model)
    logits = head(norm(stream[-1][:, pos]))[0]  # the model's own, before any soft cap (which keeps the order)
    if target is None:
        target = int(logits.argmax())
    u = head.weight[target].double() - (head.weight[versus].double() if versus is not None else 0.0)
    if isinstance(norm, torch.nn.LayerNorm):
        r = torch.rsqrt(x.var(unbiased=False) + norm.eps)
        values = ((components - components.mean(-1, keepdim=True)) * norm.weight.double() * r) @ u
        bias = norm.bias.double() @ u
    else:
        r = torch.rsqrt(x.pow(2).mean() + norm.eps)
        values = (components * norm.weight.double() * r) @ u
        bias = torch.zeros((), dtype=torch.float64)
    if head.bias is not None:
        bias = bias + head.bias[target].double() - (head.bias[versus].double() if versus is not None else 0.0)
    logit = float(logits[target] - (logits[versus] if versus is not None else 0.0))
    total = float(values.sum() + bias)
    rows = [{"name": name, "value": float(v)} for name, v in zip(names, values)]
    if float(bias) != 0.0 or isinstance(norm, torch.nn.LayerNorm):
        rows.append({"name": "bias", "value": float(bias)})
    return {
        "ids": ids, "tokens": inspected.labels(ids), "position": pos,
        "target": {"id": target, "token": inspected.label(target)},
        "versus": None if versus is None else {"id": versus, "token": inspected.label(versus)},
        "logit": logit, "parts": rows, "sum": total, "residual_error": abs(total - logit),
        "before_soft_cap": bool(model.config.logit_softcap),
    }
