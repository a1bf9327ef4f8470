"""Rows that cannot move the loss leave the micro-batch before the update computes them.

A rollout whose advantage is 0 on every response token adds exactly 0 to the clipped surrogate and to
its gradient: GRPO's groups whose G rewards are all equal, DAPO's groups dropped by dynamic sampling
(their mask is 0). With no KL term in the loss (beta 0) and no value head, such a row is pure cost:
early in RL on a hard task most groups are uninformative, and every row is computed over its whole
prompt (on builtin:calc about 110 context tokens for 25 sampled ones). So they are dropped here, and
the columns past the longest kept row are cut too (causal attention: no later token changes an earlier
logit). The step's loss units are counted before the drop (each micro-batch keeps its own in
"units"), so the loss and its gradient are the ones the whole batch gives; the logged token means
(entropy, ratio, clip fraction, KL) become means over the rows that were computed.
"""

from __future__ import annotations

from typing import Any

from tinylm.stages.rl.algorithm import Algorithm

ROW_KEYS = ("ids", "mask", "old_logp", "sampler_logp", "ref_logp", "advantages", "score", "reward", "correct",
            "stopped")


def rows_can_be_dropped(algo: Algorithm, has_reference: bool) -> bool:
    """Whether a row with zero advantages contributes nothing: no KL in the loss and no value loss."""
    return not algo.value_head and not (algo.beta and has_reference)


def drop_inert_rows(batch: dict[str, Any]) -> float:
    """Keep the rows with a non-zero advantage (at least one row); returns the response tokens kept."""
    mask = batch["mask"]
    moving = ((batch["advantages"] != 0) & (mask > 0)).any(dim=1)
    if not bool(moving.any()):
        moving[0] = True  # an inert row stands in: every rank's update still runs a forward and a backward
    kept = moving.nonzero().squeeze(1)
    response = (mask[kept] > 0).any(dim=0).nonzero()
    width = int(response.max()) + 1 if response.numel() else 1  # target columns up to the last sampled token
    for key in ROW_KEYS:
        if key in batch:
            rows = batch[key][kept]
            batch[key] = rows[:, :width + 1] if key == "ids" else rows[:, :width] if rows.dim() == 2 else rows
    return float(batch["mask"].sum())
