"""Activation patching: where does the model compute the difference between two prompts?

Run a clean prompt (`What is 23 + 45?`) and a corrupted one of the same token length (`... 46?`), and
measure a metric on each at the last position: the logit difference between the clean answer and the
corrupted one, or the clean answer's log-probability. Then rerun the corrupted prompt with one
activation taken from the clean run and measure again:

    restored = (metric(patched) - metric(corrupted)) / (metric(clean) - metric(corrupted))

1 means that activation alone carries what distinguishes the prompts, 0 that it carries none of it.
Three grids: the residual stream at every (layer, position) (layer 0: the embedding; layer l: after
block l-1), every head's output at every position at once, and every MLP's output at every
(layer, position). Each row of a grid is one batched forward pass (models/hooks/patching.py).
"""

from __future__ import annotations

from typing import Any, Literal

import torch

from tinylm.errors import TinyLMError
from tinylm.interpret.loading import Inspected, as_batch
from tinylm.models.hooks.head_outputs import record_head_outputs
from tinylm.models.hooks.mlp_outputs import record_mlp_outputs
from tinylm.models.hooks.patching import patched
from tinylm.models.hooks.residual import record_residual

Metric = Literal["logit_diff", "logprob"]
METRICS: tuple[str, ...] = ("logit_diff", "logprob")


def metric_of(logits: torch.Tensor, metric: Metric, answer: int, wrong: int) -> torch.Tensor:
    """[B] the metric at the last position of logits [B, T, vocab]."""
    last = logits[:, -1].double()
    if metric == "logit_diff":
        return last[:, answer] - last[:, wrong]
    return torch.log_softmax(last, dim=-1)[:, answer]


@torch.no_grad()
def activation_patching(inspected: Inspected, clean: list[int], corrupt: list[int], metric: Metric = "logit_diff",
                        answer: int | None = None, wrong: int | None = None) -> dict[str, Any]:
    """{"clean", "corrupt" ids and tokens, "answer", "wrong", "metric": {clean, corrupted},
    "residual": R[layer 0..n_blocks][position], "heads": H[layer][head], "mlp": M[layer][position]},
    each grid the share of the clean metric restored."""
    if len(clean) != len(corrupt):
        raise TinyLMError(f"the clean prompt is {len(clean)} tokens and the corrupted one {len(corrupt)}: "
                          "patching compares them position by position, so they must have the same token length")
    if metric not in METRICS:
        raise TinyLMError(f"--metric {metric}: one of {', '.join(METRICS)}")
    model = inspected.model
    with record_residual(model) as stream, record_head_outputs(model) as heads, record_mlp_outputs(model) as mlps:
        clean_logits = model(as_batch(clean))[0]
    corrupt_logits = model(as_batch(corrupt))[0]
    if answer is None:  # what the clean prompt's model says next
        answer = int(clean_logits[0, -1].argmax())
    if wrong is None:  # what the corrupted one says, or its best other token
        ranked = corrupt_logits[0, -1].argsort(descending=True).tolist()
        wrong = next(t for t in ranked if t != answer)
    clean_value = float(metric_of(clean_logits, metric, answer, wrong)[0])
    corrupt_value = float(metric_of(corrupt_logits, metric, answer, wrong)[0])
    if abs(clean_value - corrupt_value) < 1e-9:
        raise TinyLMError(f"the clean and corrupted prompts give the same {metric} ({clean_value:.4f}): there is "
                          "nothing for patching to restore; choose prompts (or answers) the model tells apart")
    T = len(clean)
    batch = as_batch(corrupt).expand(T, T)
    one_position = torch.eye(T, dtype=torch.bool)  # row p patches position p

    def restored(site: str, layer: int, where: torch.Tensor, source: torch.Tensor, rows: torch.Tensor) -> list:
        with patched(model, site, layer, where, source):
            values = metric_of(model(rows)[0], metric, answer, wrong)
        return ((values - corrupt_value) / (clean_value - corrupt_value)).tolist()

    residual = [restored("residual", layer, one_position, stream[layer], batch) for layer in range(len(stream))]
    mlp = [restored("mlp", layer, one_position, mlps[layer], batch) for layer in range(len(mlps))]
    head_grid = []
    for layer, values in enumerate(heads):
        H = values.shape[2]
        where = torch.eye(H, dtype=torch.bool)[:, None, :].expand(H, T, H)  # row h patches head h everywhere
        head_grid.append(restored("heads", layer, where, values, as_batch(corrupt).expand(H, T)))
    return {
        "clean": {"ids": clean, "tokens": inspected.labels(clean)},
        "corrupt": {"ids": corrupt, "tokens": inspected.labels(corrupt)},
        "answer": {"id": answer, "token": inspected.label(answer)},
        "wrong": {"id": wrong, "token": inspected.label(wrong)},
        "metric": {"name": metric, "clean": clean_value, "corrupted": corrupt_value},
        "residual": residual, "heads": head_grid, "mlp": mlp,
    }
