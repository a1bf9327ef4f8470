"""The loss of one micro-batch of rollouts: the clipped surrogate, plus the KL to the reference or PPO's value loss.

Per response token: the ratio of the current policy to the one that sampled (per sequence for GSPO),
clipped, times the advantage; plus beta * KL to the reference (PPO has its KL in the reward instead);
plus c_v * the clipped value loss (PPO). The per-token loss is aggregated as the algorithm says into
a sum over its units (`policy_losses.aggregate`); the engine divides by the step's units.

Rollouts from a server (`rollout_server.py`) carry the server's log-probs too; the surrogate of each
token is then weighed by truncated importance sampling, w_t = min(pi_old(y_t) / pi_sampler(y_t), C)
(`tis_weights`), which corrects for the sampler's numbers not being the trainer's.

The logged metrics are sums the engine divides by the step's units W as well: token sums are scaled
by W / T (T: the step's response tokens) to read as token means, and the round's constants (reward,
accuracy...) by each micro-batch's share of W, so every row of metrics.jsonl is a mean over the step.
"""

from __future__ import annotations

import torch
from torch import nn

from tinylm.stages.rl.algorithm import Algorithm
from tinylm.stages.rl.config import RLConfig
from tinylm.stages.rl.kl import kl_estimate
from tinylm.stages.rl.policy_losses import (
    aggregate,
    clipped_surrogate,
    clipped_value_loss,
    gspo_surrogate,
    token_entropy,
)
from tinylm.stages.rl.rollout import on_response, response_logprobs
from tinylm.train.stage import Batch, StageLoss


def tis_weights(old_logp: torch.Tensor, sampler_logp: torch.Tensor, cap: float) -> tuple[torch.Tensor, torch.Tensor]:
    """(w = min(exp(old - sampler), cap), 1 where the cap bit): constants, no gradient flows through them."""
    ratio = torch.exp(old_logp - sampler_logp).detach()
    return ratio.clamp(max=cap), (ratio > cap).to(old_logp.dtype)


def rollout_loss(model: nn.Module, batch: Batch, algo: Algorithm, cfg: RLConfig, world_size: int) -> StageLoss:
    """The summed loss of `batch` (a micro-batch from the rollout collector) and its summed metrics."""
    mask, ids = batch["mask"], batch["ids"]
    values = None
    # the head runs on the response tokens only: logp is 0 elsewhere, and so is old (ratio 1, finite)
    logp, logits, second = response_logprobs(model, ids, cfg.temperature, mask)
    if algo.value_head:
        assert second is not None  # PolicyWithValue's values
        values = on_response(second.float(), mask)
    old, adv = batch["old_logp"] * (mask > 0), batch["advantages"]
    if algo.sequence_ratio:
        per_token, clipped = gspo_surrogate(logp, old, adv, mask, algo.clip_low, algo.clip_high)
    else:
        per_token, clipped = clipped_surrogate(logp, old, adv, algo.clip_low, algo.clip_high)
    m = mask.float()
    token_metrics: dict[str, torch.Tensor] = {"clip_frac": (clipped * m).sum(),
                                              "ratio": (torch.exp(logp - old) * m).sum().detach()}
    if "sampler_logp" in batch:
        weights, capped = tis_weights(old, batch["sampler_logp"] * (mask > 0), cfg.tis_cap)
        per_token = per_token * weights
        token_metrics.update({"tis_weight": (weights * m).sum(), "tis_capped_frac": (capped * m).sum(),
                              "sampler_gap": ((old - batch["sampler_logp"]).abs() * m).sum()})
    with torch.no_grad():
        token_metrics["entropy"] = token_entropy(logits.detach() / cfg.temperature).sum()  # response tokens
    if "ref_logp" in batch:
        kl = kl_estimate(logp, batch["ref_logp"], cfg.kl_estimator)
        token_metrics["kl"] = (kl.detach() * m).sum()
        if algo.beta and not algo.value_head:
            per_token = per_token + algo.beta * kl
    if values is not None:
        value_loss = clipped_value_loss(values, batch["old_values"], batch["returns"], cfg.value_clip)
        token_metrics["value_loss"] = (value_loss.detach() * m).sum()
        per_token = per_token + cfg.vf_coef * value_loss
    total, _ = aggregate(per_token, mask, algo.aggregation, constant=float(cfg.max_new_tokens))
    # logged as sum / step units: token sums are scaled to token means, step constants to themselves
    W, T = batch["step_units"], batch["step_tokens"]
    share = W / (cfg.grad_accum * world_size)
    metrics = {k: v.detach().float() * (W / T) for k, v in token_metrics.items()}
    metrics.update({k: torch.tensor(float(v) * share, device=ids.device) for k, v in batch["step_metrics"].items()})
    metrics["epoch"] = torch.tensor(float(batch["epoch"]) * share, device=ids.device)
    return StageLoss(total, metrics)
