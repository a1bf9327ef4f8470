"""The DPO family: each preference loss as a pure function of answer log-probs, with its published defaults.

Every loss here reads the same numbers for each pair (prompt x, chosen answer y_w, rejected answer y_l):
the policy's summed log-probs log pi(y|x) of the answer tokens, the frozen reference's (when the loss
has one), and the answers' token counts |y|. With the log-ratios

    rho_w = log pi(y_w|x) - log pi_ref(y_w|x),    rho_l = log pi(y_l|x) - log pi_ref(y_l|x),    h = rho_w - rho_l

each function returns one loss per pair (the stage sums them; the engine divides by the step's pairs)
and the implicit rewards it logs. Nothing here knows about models or batches, so every formula is
tested on hand-built numbers against its closed form, an independent NumPy version and `trl`
(tests/test_preference_losses.py); docs/posttrain/preference.md derives each one.

Defaults are the published ones (the papers, or `trl` where a paper leaves them open); `resolve`
fills them in and refuses an unknown name or a beta <= 0 with one line.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import torch
import torch.nn.functional as F

from tinylm.errors import TinyLMError


@dataclass(frozen=True)
class PairLogps:
    """Answer log-probs of a batch of N pairs, each [N]; `*_present` marks the sides unpaired KTO rows have."""

    chosen: torch.Tensor  # log pi(y_w|x): summed over the chosen answer's tokens
    rejected: torch.Tensor  # log pi(y_l|x)
    chosen_tokens: torch.Tensor  # |y_w|
    rejected_tokens: torch.Tensor  # |y_l|
    ref_chosen: torch.Tensor | None = None  # log pi_ref(y_w|x); None for the reference-free losses
    ref_rejected: torch.Tensor | None = None
    chosen_present: torch.Tensor | None = None  # 1 where the row has a desirable side (None: every row)
    rejected_present: torch.Tensor | None = None

    def ratios(self) -> tuple[torch.Tensor, torch.Tensor]:
        """(rho_w, rho_l): policy minus reference log-probs."""
        if self.ref_chosen is None or self.ref_rejected is None:
            raise ValueError("this loss needs the reference model's log-probs")
        return self.chosen - self.ref_chosen, self.rejected - self.ref_rejected

    def averages(self) -> tuple[torch.Tensor, torch.Tensor]:
        """Mean log-prob per answer token, log pi(y|x) / |y|, for the length-normalised losses."""
        return self.chosen / self.chosen_tokens, self.rejected / self.rejected_tokens


@dataclass(frozen=True)
class PairLoss:
    """Per-pair losses [N] and the implicit rewards of each side [N] (detached), which the stage logs."""

    losses: torch.Tensor
    chosen_rewards: torch.Tensor
    rejected_rewards: torch.Tensor


def _rewards(losses: torch.Tensor, chosen: torch.Tensor, rejected: torch.Tensor) -> PairLoss:
    return PairLoss(losses, chosen.detach(), rejected.detach())


# ---- reference-based: functions of the log-ratios ------------------------------------------------
def dpo_loss(p: PairLogps, beta: float) -> PairLoss:
    """DPO (Rafailov et al., 2023): -log sigmoid(beta h); ln 2 at pi = pi_ref."""
    rho_w, rho_l = p.ratios()
    return _rewards(-F.logsigmoid(beta * (rho_w - rho_l)), beta * rho_w, beta * rho_l)


def rpo_loss(p: PairLogps, beta: float, lam: float) -> PairLoss:
    """RPO (Pang et al., 2024): DPO plus lam times the chosen answer's NLL per token. DPO alone may lower both
    answers' likelihood as long as the rejected one falls faster; the NLL term keeps the chosen one up."""
    rho_w, rho_l = p.ratios()
    losses = -F.logsigmoid(beta * (rho_w - rho_l)) + lam * (-p.chosen / p.chosen_tokens)
    return _rewards(losses, beta * rho_w, beta * rho_l)


def cdpo_loss(p: PairLogps, beta: float, label_smoothing: float) -> PairLoss:
    """Conservative DPO: the labels are flipped with probability eps, so the target is (1 - eps, eps)."""
    rho_w, rho_l = p.ratios()
    logits = beta * (rho_w - rho_l)
    losses = -(1 - label_smoothing) * F.logsigmoid(logits) - label_smoothing * F.logsigmoid(-logits)
    return _rewards(losses, beta * rho_w, beta * rho_l)


def robust_loss(p: PairLogps, beta: float, label_smoothing: float) -> PairLoss:
    """Robust DPO (Chowdhury et al., 2024): an unbiased loss under label flips of rate eps < 1/2."""
    rho_w, rho_l = p.ratios()
    logits = beta * (rho_w - rho_l)
    losses = (-(1 - label_smoothing) * F.logsigmoid(logits) + label_smoothing * F.logsigmoid(-logits)) \
        / (1 - 2 * label_smoothing)
    return _rewards(losses, beta * rho_w, beta * rho_l)


def ipo_loss(p: PairLogps, beta: float) -> PairLoss:
    """IPO (Azar et al., 2023): (h - 1 / (2 beta))^2 on per-token log-ratios (as its authors and trl compute it)."""
    rho_w, rho_l = p.ratios()
    avg_w, avg_l = rho_w / p.chosen_tokens, rho_l / p.rejected_tokens
    return _rewards((avg_w - avg_l - 1 / (2 * beta)) ** 2, beta * rho_w, beta * rho_l)


def hinge_loss(p: PairLogps, beta: float) -> PairLoss:
    """SLiC-HF (Zhao et al., 2023): max(0, 1 - beta h), a hinge on the log-ratio margin."""
    rho_w, rho_l = p.ratios()
    return _rewards(torch.relu(1 - beta * (rho_w - rho_l)), beta * rho_w, beta * rho_l)


def apo_zero_loss(p: PairLogps, beta: float) -> PairLoss:
    """APO-zero (D'Oosterlinck et al., 2024): push the chosen log-ratio up and the rejected one down, each anchored."""
    rho_w, rho_l = p.ratios()
    losses = (1 - torch.sigmoid(beta * rho_w)) + torch.sigmoid(beta * rho_l)
    return _rewards(losses, beta * rho_w, beta * rho_l)


def _present(p: PairLogps) -> tuple[torch.Tensor, torch.Tensor]:
    """1 where a row has that side: every row of a paired batch, one side of an unpaired KTO row."""
    has_w = torch.ones_like(p.chosen) if p.chosen_present is None else p.chosen_present
    has_l = torch.ones_like(p.rejected) if p.rejected_present is None else p.rejected_present
    return has_w, has_l


def kto_ratio_sums(p: PairLogps) -> torch.Tensor:
    """[sum of the log-ratios over the present sides, their number], detached: what z_0 averages. Sums rather
    than a mean, so several batches (a step's micro-batches, every rank's share) add theirs before dividing."""
    rho_w, rho_l = p.ratios()
    has_w, has_l = _present(p)
    return torch.stack([(rho_w * has_w).sum() + (rho_l * has_l).sum(), has_w.sum() + has_l.sum()]).detach()


def kto_reference_point(sums: torch.Tensor) -> torch.Tensor:
    """KTO's z_0, an estimate of KL(pi || pi_ref): the mean log-ratio of `kto_ratio_sums`, clamped at 0, without
    gradient (as in the paper and trl). The DPO stage gives it the sums of the whole optimizer step."""
    return (sums[0] / sums[1].clamp(min=1)).clamp(min=0).detach()


def kto_loss(p: PairLogps, beta: float, desirable_weight: float, undesirable_weight: float,
             reference_point: torch.Tensor | None = None) -> PairLoss:
    """KTO (Ethayarajh et al., 2024): a desirable answer's value sigmoid(beta (rho - z_0)), an undesirable one's
    sigmoid(beta (z_0 - rho)); the loss is weight * (1 - value) per present side, so paired rows count both.
    `reference_point` is z_0 when given (the step's, from the stage); else this batch's own."""
    rho_w, rho_l = p.ratios()
    z0 = kto_reference_point(kto_ratio_sums(p)) if reference_point is None else reference_point
    has_w, has_l = _present(p)
    losses = (desirable_weight * has_w * (1 - torch.sigmoid(beta * (rho_w - z0)))
              + undesirable_weight * has_l * (1 - torch.sigmoid(beta * (z0 - rho_l))))
    return _rewards(losses, beta * rho_w, beta * rho_l)


# ---- reference-free: functions of the policy alone ------------------------------------------------
def simpo_loss(p: PairLogps, beta: float, gamma: float) -> PairLoss:
    """SimPO (Meng et al., 2024): -log sigmoid(beta (avg_w - avg_l) - gamma) on mean per-token log-probs."""
    avg_w, avg_l = p.averages()
    return _rewards(-F.logsigmoid(beta * (avg_w - avg_l) - gamma), beta * avg_w, beta * avg_l)


def cpo_loss(p: PairLogps, beta: float, lam: float) -> PairLoss:
    """CPO (Xu et al., 2024): DPO with a uniform reference, -log sigmoid(beta (log pi_w - log pi_l)), plus lam times
    the chosen answer's NLL per token (a behaviour-cloning term that keeps the model on the preferred text)."""
    nll = -p.chosen / p.chosen_tokens
    losses = -F.logsigmoid(beta * (p.chosen - p.rejected)) + lam * nll
    return _rewards(losses, beta * p.chosen, beta * p.rejected)


def log1mexp(x: torch.Tensor) -> torch.Tensor:
    """log(1 - exp(x)) for x < 0, accurate at both ends (Maechler, 2012)."""
    return torch.where(x > -0.6931471805599453, torch.log(-torch.expm1(x)), torch.log1p(-torch.exp(x)))


def orpo_loss(p: PairLogps, lam: float) -> PairLoss:
    """ORPO (Hong et al., 2024): the chosen NLL per token minus lam log sigmoid(log odds_w - log odds_l), where
    odds(y) = P / (1 - P) with P = exp(mean per-token log-prob); no reference model."""
    avg_w, avg_l = p.averages()
    log_odds = (avg_w - avg_l) - (log1mexp(avg_w) - log1mexp(avg_l))
    losses = -avg_w - lam * F.logsigmoid(log_odds)
    return _rewards(losses, lam * avg_w, lam * avg_l)


# ---- the registry ---------------------------------------------------------------------------------
@dataclass(frozen=True)
class LossSpec:
    """A loss, whether it needs pi_ref, its hyper-parameters with their published defaults, and its source."""

    fn: Callable[..., PairLoss]
    needs_reference: bool
    defaults: dict[str, float]
    paper: str
    unpaired: bool = False  # accepts rows with only one side (KTO)


LOSSES: dict[str, LossSpec] = {
    "dpo": LossSpec(dpo_loss, True, {"beta": 0.1}, "Rafailov et al. 2023, arXiv:2305.18290"),
    "rpo": LossSpec(rpo_loss, True, {"beta": 0.1, "lam": 1.0}, "Pang et al. 2024, arXiv:2404.19733"),
    "cdpo": LossSpec(cdpo_loss, True, {"beta": 0.1, "label_smoothing": 0.1}, "Mitchell 2023, cDPO note"),
    "robust": LossSpec(robust_loss, True, {"beta": 0.1, "label_smoothing": 0.1},
                       "Chowdhury et al. 2024, arXiv:2403.00409"),
    "ipo": LossSpec(ipo_loss, True, {"beta": 0.1}, "Azar et al. 2023, arXiv:2310.12036"),
    "hinge": LossSpec(hinge_loss, True, {"beta": 0.1}, "Zhao et al. 2023 (SLiC-HF), arXiv:2305.10425"),
    "simpo": LossSpec(simpo_loss, False, {"beta": 2.0, "gamma": 0.5}, "Meng et al. 2024, arXiv:2405.14734"),
    "cpo": LossSpec(cpo_loss, False, {"beta": 0.1, "lam": 1.0}, "Xu et al. 2024, arXiv:2401.08417"),
    "orpo": LossSpec(orpo_loss, False, {"lam": 0.1}, "Hong et al. 2024, arXiv:2403.07691"),
    "kto": LossSpec(kto_loss, True, {"beta": 0.1, "desirable_weight": 1.0, "undesirable_weight": 1.0},
                    "Ethayarajh et al. 2024, arXiv:2402.01306", unpaired=True),
    "apo_zero": LossSpec(apo_zero_loss, True, {"beta": 0.1}, "D'Oosterlinck et al. 2024, arXiv:2408.06266"),
}


def loss_names() -> str:
    return ", ".join(LOSSES)


def resolve(name: str, **given: float | None) -> tuple[LossSpec, dict[str, float]]:
    """The loss `name` and its hyper-parameters: the given ones (None = default) that it takes. Their ranges live on
    their options (DPOConfig), which refuse a bad value however it came."""
    if name not in LOSSES:
        raise TinyLMError(f"unknown --loss {name!r}: choose one of {loss_names()}")
    spec = LOSSES[name]
    params = {key: float(given[key]) if given.get(key) is not None else default
              for key, default in spec.defaults.items()}
    return spec, params


def pair_loss(name: str, p: PairLogps, params: dict[str, Any]) -> PairLoss:
    """Per-pair losses of `name` with resolved hyper-parameters."""
    return LOSSES[name].fn(p, **params)
