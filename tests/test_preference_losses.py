"""Every preference loss proved on numbers: its closed form at pi = pi_ref, an independent NumPy version,
gradcheck, the properties its paper claims, and `trl` where it exposes the same loss on plain tensors."""

from __future__ import annotations

import math
import os
import re
import types
from pathlib import Path

import numpy as np
import pytest
import torch

from tinylm.errors import TinyLMError
from tinylm.stages.preference.config import DPOConfig
from tinylm.stages.preference.losses import (
    LOSSES,
    PairLogps,
    kto_ratio_sums,
    kto_reference_point,
    pair_loss,
    resolve,
)

REFERENCE_LOSSES = [name for name, spec in LOSSES.items() if spec.needs_reference]
FREE_LOSSES = [name for name, spec in LOSSES.items() if not spec.needs_reference]
# non-default hyper-parameters, so a default baked into a formula cannot pass
PARAMS: dict[str, dict[str, float]] = {
    "dpo": {"beta": 0.3}, "rpo": {"beta": 0.3, "lam": 0.7}, "cdpo": {"beta": 0.3, "label_smoothing": 0.2},
    "robust": {"beta": 0.3, "label_smoothing": 0.2}, "ipo": {"beta": 0.7}, "hinge": {"beta": 0.05},
    "simpo": {"beta": 2.5, "gamma": 0.8}, "cpo": {"beta": 0.4, "lam": 0.6},
    "orpo": {"lam": 0.25}, "kto": {"beta": 0.2, "desirable_weight": 1.5, "undesirable_weight": 0.7},
    "apo_zero": {"beta": 0.4},
}


def pairs(n: int = 6, seed: int = 0, equal_ref: bool = False, requires_grad: bool = False) -> PairLogps:
    """Random float64 log-probs of n pairs (answers of 1..9 tokens, per-token log-probs in (-3, -0.05))."""
    g = torch.Generator().manual_seed(seed)
    n_w, n_l = (torch.randint(1, 10, (n,), generator=g).double() for _ in range(2))
    chosen = -(torch.rand(n, generator=g, dtype=torch.float64) * 2.95 + 0.05) * n_w
    rejected = -(torch.rand(n, generator=g, dtype=torch.float64) * 2.95 + 0.05) * n_l
    ref_w = chosen.clone() if equal_ref else chosen + torch.randn(n, generator=g, dtype=torch.float64)
    ref_l = rejected.clone() if equal_ref else rejected + torch.randn(n, generator=g, dtype=torch.float64)
    return PairLogps(chosen.requires_grad_(requires_grad), rejected.requires_grad_(requires_grad), n_w, n_l,
                     ref_w, ref_l)


# ---- 1. the closed form at pi = pi_ref ---------------------------------------------------------------
def closed_form_at_reference(name: str, p: dict[str, float], nll: np.ndarray) -> np.ndarray:
    """Each loss's value when nothing separates chosen from rejected (derived in docs/posttrain/preference.md)."""
    ln2 = math.log(2.0)
    return {
        "dpo": ln2, "cdpo": ln2, "robust": ln2, "hinge": 1.0, "apo_zero": 1.0,
        "ipo": 1.0 / (4.0 * p.get("beta", 1.0) ** 2),
        "kto": 0.5 * (p.get("desirable_weight", 0.0) + p.get("undesirable_weight", 0.0)),
        "simpo": math.log1p(math.exp(p.get("gamma", 0.0))),
        "cpo": ln2 + p.get("lam", 0.0) * nll, "rpo": ln2 + p.get("lam", 0.0) * nll,
        "orpo": nll + p.get("lam", 0.0) * ln2,
    }[name] * np.ones_like(nll)


@pytest.mark.parametrize("defaults", [True, False], ids=["published", "custom"])
@pytest.mark.parametrize("name", list(LOSSES))
def test_value_at_the_reference_is_the_closed_form(name: str, defaults: bool) -> None:
    params = resolve(name, **({} if defaults else PARAMS[name]))[1]
    if name in REFERENCE_LOSSES:
        p = pairs(equal_ref=True)  # pi = pi_ref
    else:  # reference-free: an indifferent policy, the same log-prob on both sides (per token for SimPO, ORPO)
        base = pairs()
        per_token = base.chosen / base.chosen_tokens
        rejected = base.chosen if name == "cpo" else per_token * base.rejected_tokens
        p = PairLogps(base.chosen, rejected, base.chosen_tokens, base.rejected_tokens)
    nll = (-p.chosen / p.chosen_tokens).numpy()
    losses = pair_loss(name, p, params).losses.numpy()
    np.testing.assert_allclose(losses, closed_form_at_reference(name, params, nll), rtol=0, atol=1e-12)


# ---- 2. an independent NumPy implementation, and gradcheck ------------------------------------------
def _logsig(x: np.ndarray) -> np.ndarray:
    return -np.logaddexp(0.0, -x)


def _sig(x: np.ndarray) -> np.ndarray:
    return 1.0 / (1.0 + np.exp(-x))


def numpy_loss(name: str, p: PairLogps, k: dict[str, float]) -> np.ndarray:
    w, l_ = p.chosen.detach().numpy(), p.rejected.detach().numpy()
    nw, nl = p.chosen_tokens.numpy(), p.rejected_tokens.numpy()
    if name in REFERENCE_LOSSES:
        rw, rl = w - p.ref_chosen.numpy(), l_ - p.ref_rejected.numpy()
        beta_h = k.get("beta", 1.0) * (rw - rl)
    if name == "dpo":
        return -_logsig(beta_h)
    if name == "rpo":
        return -_logsig(beta_h) - k["lam"] * w / nw
    if name == "cdpo":
        e = k["label_smoothing"]
        return -(1 - e) * _logsig(beta_h) - e * _logsig(-beta_h)
    if name == "robust":
        e = k["label_smoothing"]
        return ((1 - e) * -_logsig(beta_h) - e * -_logsig(-beta_h)) / (1 - 2 * e)
    if name == "ipo":
        return (rw / nw - rl / nl - 0.5 / k["beta"]) ** 2
    if name == "hinge":
        return np.maximum(0.0, 1.0 - beta_h)
    if name == "apo_zero":
        return 1.0 - _sig(k["beta"] * rw) + _sig(k["beta"] * rl)
    if name == "kto":
        z = max(0.0, float(np.concatenate([rw, rl]).mean()))
        return (k["desirable_weight"] * (1 - _sig(k["beta"] * (rw - z)))
                + k["undesirable_weight"] * (1 - _sig(k["beta"] * (z - rl))))
    aw, al = w / nw, l_ / nl
    if name == "simpo":
        return -_logsig(k["beta"] * (aw - al) - k["gamma"])
    if name == "cpo":
        return -_logsig(k["beta"] * (w - l_)) - k["lam"] * aw
    if name == "orpo":
        log_odds = lambda a: a - np.log(1.0 - np.exp(a))  # noqa: E731 - the definition, written as read
        return -aw - k["lam"] * _logsig(log_odds(aw) - log_odds(al))
    raise AssertionError(name)


@pytest.mark.parametrize("name", list(LOSSES))
def test_value_equals_an_independent_numpy_implementation(name: str) -> None:
    for seed in range(3):
        p = pairs(seed=seed)
        ours = pair_loss(name, p, PARAMS[name]).losses.numpy()
        np.testing.assert_allclose(ours, numpy_loss(name, p, PARAMS[name]), rtol=0, atol=1e-10)


@pytest.mark.parametrize("name", list(LOSSES))
def test_gradcheck(name: str) -> None:
    p = pairs(seed=4, requires_grad=True)
    params = dict(PARAMS[name])
    if name == "kto":  # z_0 carries no gradient by definition; give it as a constant so finite differences agree
        params["reference_point"] = torch.tensor(0.3, dtype=torch.float64)
    if name == "hinge":  # away from the kink at beta h = 1
        params["beta"] = 0.01

    def f(chosen: torch.Tensor, rejected: torch.Tensor) -> torch.Tensor:
        q = PairLogps(chosen, rejected, p.chosen_tokens, p.rejected_tokens, p.ref_chosen, p.ref_rejected)
        return LOSSES[name].fn(q, **params).losses

    assert torch.autograd.gradcheck(f, (p.chosen, p.rejected), eps=1e-6, atol=1e-8)


# ---- 3. the properties the papers (and the original project) state --------------------------------
def test_dpo_implicit_accuracy_and_rewards() -> None:
    """The implicit reward is beta * log-ratio; the loss is below ln 2 exactly when the chosen reward is higher."""
    p = pairs(n=50, seed=7)
    out = pair_loss("dpo", p, {"beta": 0.1})
    rho_w, rho_l = p.ratios()
    torch.testing.assert_close(out.chosen_rewards, 0.1 * rho_w, rtol=0, atol=1e-15)
    right = out.chosen_rewards > out.rejected_rewards
    assert 0 < int(right.sum()) < 50  # both kinds present
    assert torch.equal(right, out.losses < math.log(2))


def test_label_smoothing_shrinks_the_gap_between_a_pair_and_its_flip() -> None:
    p = pairs(seed=8)
    flipped = PairLogps(p.rejected, p.chosen, p.rejected_tokens, p.chosen_tokens, p.ref_rejected, p.ref_chosen)
    gaps = []
    for eps in (0.0, 0.1, 0.25, 0.4, 0.5):
        k = {"beta": 0.5, "label_smoothing": eps}
        gaps.append((pair_loss("cdpo", p, k).losses - pair_loss("cdpo", flipped, k).losses).abs())
    for wider, narrower in zip(gaps, gaps[1:]):
        assert bool((narrower < wider).all())
    torch.testing.assert_close(gaps[-1], torch.zeros_like(gaps[-1]), rtol=0, atol=1e-15)  # cancels at 0.5
    torch.testing.assert_close(pair_loss("cdpo", p, {"beta": 0.5, "label_smoothing": 0.0}).losses,
                               pair_loss("dpo", p, {"beta": 0.5}).losses, rtol=0, atol=1e-15)


def test_robust_dpo_is_unbiased_under_label_noise() -> None:
    """Its expectation over flips at rate eps equals the clean DPO loss (Chowdhury et al., Lemma 3.1)."""
    p = pairs(seed=9)
    flipped = PairLogps(p.rejected, p.chosen, p.rejected_tokens, p.chosen_tokens, p.ref_rejected, p.ref_chosen)
    eps = 0.2
    k = {"beta": 0.5, "label_smoothing": eps}
    expected = (1 - eps) * pair_loss("robust", p, k).losses + eps * pair_loss("robust", flipped, k).losses
    torch.testing.assert_close(expected, pair_loss("dpo", p, {"beta": 0.5}).losses, rtol=0, atol=1e-12)


def _with_ratio_gap(gap: float, beta: float = 0.5) -> PairLogps:
    """One pair whose per-token log-ratio gap is `gap` (IPO reads per-token ratios)."""
    t = lambda x: torch.tensor([x], dtype=torch.float64)  # noqa: E731
    return PairLogps(t(-2.0 + 4 * gap), t(-3.0), t(4.0), t(2.0), t(-2.0), t(-3.0))


def test_ipo_is_zero_at_the_target_gap_and_penalises_overshooting() -> None:
    beta = 0.5
    target = 1 / (2 * beta)
    at = pair_loss("ipo", _with_ratio_gap(target), {"beta": beta}).losses
    assert abs(float(at)) < 1e-24
    over = pair_loss("ipo", _with_ratio_gap(target + 0.7), {"beta": beta}).losses
    under = pair_loss("ipo", _with_ratio_gap(target - 0.7), {"beta": beta}).losses
    assert float(over) == pytest.approx(0.49, abs=1e-12) and float(under) == pytest.approx(0.49, abs=1e-12)
    dpo_over = pair_loss("dpo", _with_ratio_gap(target + 0.7), {"beta": beta}).losses
    assert float(dpo_over) < float(pair_loss("dpo", _with_ratio_gap(target), {"beta": beta}).losses)  # DPO does not


def test_simpo_is_unchanged_when_log_probs_and_lengths_are_doubled() -> None:
    p = pairs(seed=10)
    doubled = PairLogps(2 * p.chosen, 2 * p.rejected, 2 * p.chosen_tokens, 2 * p.rejected_tokens)
    k = {"beta": 2.0, "gamma": 0.5}
    torch.testing.assert_close(pair_loss("simpo", doubled, k).losses, pair_loss("simpo", p, k).losses,
                               rtol=0, atol=1e-14)
    summed = PairLogps(2 * p.chosen, 2 * p.rejected, p.chosen_tokens, p.rejected_tokens)  # but DPO-style sums move
    assert not torch.allclose(pair_loss("simpo", summed, k).losses, pair_loss("simpo", p, k).losses)


def test_rpo_pushes_the_chosen_answer_up_by_lambda_per_token_more_than_dpo() -> None:
    p = pairs(seed=9, requires_grad=True)
    (g_rpo,) = torch.autograd.grad(pair_loss("rpo", p, {"beta": 0.3, "lam": 0.7}).losses.sum(), p.chosen)
    q = pairs(seed=9, requires_grad=True)
    (g_dpo,) = torch.autograd.grad(pair_loss("dpo", q, {"beta": 0.3}).losses.sum(), q.chosen)
    torch.testing.assert_close(g_rpo, g_dpo - 0.7 / p.chosen_tokens, rtol=0, atol=1e-12)
    assert (g_dpo < 0).all() and (g_rpo < g_dpo).all()  # descent raises log pi(y_w), RPO more


def test_unpaired_kto_counts_only_the_present_sides() -> None:
    p = pairs(seed=11)
    only_w = PairLogps(p.chosen, p.rejected, p.chosen_tokens, p.rejected_tokens, p.ref_chosen, p.ref_rejected,
                       torch.ones(6, dtype=torch.float64), torch.zeros(6, dtype=torch.float64))
    z0 = torch.tensor(0.1, dtype=torch.float64)
    k = {"beta": 0.2, "desirable_weight": 1.0, "undesirable_weight": 1.0, "reference_point": z0}
    rho_w = p.chosen - p.ref_chosen
    torch.testing.assert_close(pair_loss("kto", only_w, k).losses, 1 - torch.sigmoid(0.2 * (rho_w - 0.1)),
                               rtol=0, atol=1e-12)


def test_kto_reference_point_from_added_sums_is_the_whole_batchs() -> None:
    """z_0 of the added sums of any split of a batch (one-sided rows included) is the whole batch's mean
    log-ratio over its present sides: what lets the DPO stage share one z_0 over a step's micro-batches."""
    p = pairs(n=7, seed=13)
    has_w = torch.tensor([1, 1, 0, 1, 1, 0, 1], dtype=torch.float64)
    has_l = torch.tensor([1, 0, 1, 1, 0, 1, 1], dtype=torch.float64)
    ref_w, ref_l = p.chosen - 0.4 * torch.arange(7), p.rejected - 0.1  # positive log-ratios: z_0 is not clamped

    def part(rows: slice) -> PairLogps:
        return PairLogps(p.chosen[rows], p.rejected[rows], p.chosen_tokens[rows], p.rejected_tokens[rows],
                         ref_w[rows], ref_l[rows], has_w[rows], has_l[rows])

    whole = part(slice(0, 7))
    rho_w, rho_l = (p.chosen - ref_w).numpy(), (p.rejected - ref_l).numpy()
    rho = np.concatenate([rho_w[has_w.numpy() == 1], rho_l[has_l.numpy() == 1]])  # the present sides only
    z0 = kto_reference_point(kto_ratio_sums(whole))
    assert float(z0) == pytest.approx(float(rho.mean()), abs=1e-12) and float(z0) > 0
    split = kto_ratio_sums(part(slice(0, 2))) + kto_ratio_sums(part(slice(2, 3))) + kto_ratio_sums(part(slice(3, 7)))
    assert float(kto_reference_point(split)) == pytest.approx(float(z0), abs=1e-12)
    assert float(kto_reference_point(kto_ratio_sums(part(slice(0, 2))))) != pytest.approx(float(z0), abs=1e-3)
    assert float(kto_reference_point(-split)) == 0.0  # a negative mean clamps to 0
    torch.testing.assert_close(pair_loss("kto", whole, PARAMS["kto"]).losses,
                               pair_loss("kto", whole, {**PARAMS["kto"], "reference_point": z0}).losses, rtol=0, atol=0)


def test_bad_names_and_hyper_parameters_are_one_line() -> None:
    with pytest.raises(TinyLMError, match="unknown --loss 'dpoo': choose one of dpo, rpo, cdpo"):
        resolve("dpoo")
    for beta in (0.0, -1.0):  # the ranges live on the options: the config refuses them, however it is built
        with pytest.raises(TinyLMError, match="--beta must be > 0"):
            DPOConfig(base="run", beta=beta)
    with pytest.raises(TinyLMError, match="--label-smoothing must be < 0.5"):
        DPOConfig(base="run", loss="cdpo", label_smoothing=0.5)
    with pytest.raises(TinyLMError, match="--lam must be >= 0"):
        DPOConfig(base="run", loss="rpo", lam=-1.0)
    assert resolve("simpo")[1] == {"beta": 2.0, "gamma": 0.5} and resolve("orpo")[1] == {"lam": 0.1}


# ---- trl, where it exposes the same loss on plain tensors -----------------------------------------
@pytest.fixture(scope="module")
def trl_trainers() -> types.SimpleNamespace:
    os.environ.setdefault("TRL_EXPERIMENTAL_SILENCE", "1")
    pytest.importorskip("trl")
    from trl.experimental.cpo.cpo_trainer import CPOTrainer
    from trl.experimental.orpo.orpo_trainer import ORPOTrainer

    return types.SimpleNamespace(cpo=CPOTrainer.cpo_loss, orpo=ORPOTrainer.odds_ratio_loss)


def _trl_self(loss_type: str, beta: float, **extra: float) -> types.SimpleNamespace:
    fields = {"alpha": 0.0, "label_smoothing": 0.0, "simpo_gamma": 0.5, **extra}
    return types.SimpleNamespace(loss_type=loss_type, beta=beta, accelerator=types.SimpleNamespace(device="cpu"),
                                 **fields)


@pytest.mark.parametrize(("name", "trl_type"), [("dpo", "sigmoid"), ("cdpo", "sigmoid"), ("hinge", "hinge"),
                                                ("ipo", "ipo")])
def test_reference_losses_agree_with_trl(trl_trainers: types.SimpleNamespace, name: str, trl_type: str) -> None:
    """trl's CPO loss is DPO's with log pi_ref = 0, so fed the log-ratios (per token for IPO) it is DPO's."""
    p = pairs(seed=12)
    k = PARAMS[name]
    rho_w, rho_l = p.ratios()
    if name == "ipo":
        rho_w, rho_l = rho_w / p.chosen_tokens, rho_l / p.rejected_tokens
    fake = _trl_self(trl_type, k["beta"], label_smoothing=k.get("label_smoothing", 0.0))
    theirs, _, _ = trl_trainers.cpo(fake, rho_w, rho_l)
    torch.testing.assert_close(pair_loss(name, p, k).losses, theirs, rtol=0, atol=1e-12)


def test_rpo_is_trls_dpo_plus_its_nll_term(trl_trainers: types.SimpleNamespace) -> None:
    """trl's DPOTrainer adds rpo_alpha times the chosen NLL to its sigmoid loss. Its NLL is a token mean over the
    whole batch, ours a token mean per answer (each pair's loss stands alone, so accumulation stays exact): the
    same thing for a batch of one pair, which is how it is compared here, pair by pair."""
    p = pairs(seed=15)
    rho_w, rho_l = p.ratios()
    dpo, _, _ = trl_trainers.cpo(_trl_self("sigmoid", 0.3), rho_w, rho_l)
    ours = pair_loss("rpo", p, PARAMS["rpo"]).losses
    for i in range(len(ours)):  # trl's batch token mean of one pair's chosen NLL
        nll = -p.chosen[i:i + 1].sum() / p.chosen_tokens[i:i + 1].sum()
        torch.testing.assert_close(ours[i], dpo[i] + 0.7 * nll, rtol=0, atol=1e-12)


def test_simpo_and_cpo_agree_with_trl(trl_trainers: types.SimpleNamespace) -> None:
    p = pairs(seed=13)
    avg_w, avg_l = p.averages()
    theirs, _, _ = trl_trainers.cpo(_trl_self("simpo", 2.5, simpo_gamma=0.8), avg_w, avg_l)
    torch.testing.assert_close(pair_loss("simpo", p, PARAMS["simpo"]).losses, theirs, rtol=0, atol=1e-12)
    preference, _, _ = trl_trainers.cpo(_trl_self("sigmoid", 0.4), p.chosen, p.rejected)
    nll = -p.chosen / p.chosen_tokens  # trl adds cpo_alpha times the chosen NLL per token
    torch.testing.assert_close(pair_loss("cpo", p, PARAMS["cpo"]).losses, preference + 0.6 * nll, rtol=0, atol=1e-12)


def test_orpo_agrees_with_trl(trl_trainers: types.SimpleNamespace) -> None:
    p = pairs(seed=14)
    avg_w, avg_l = p.averages()
    ratio_term, *_ = trl_trainers.orpo(_trl_self("orpo", 0.25), avg_w, avg_l)  # beta * log sigmoid(log odds)
    # trl computes this term in float32 (it calls .float() on its inputs)
    torch.testing.assert_close(pair_loss("orpo", p, PARAMS["orpo"]).losses, -avg_w - ratio_term.double(),
                               rtol=0, atol=1e-6)


def test_the_readme_counts_the_losses_right_or_not_at_all() -> None:
    """A count of the losses written in prose drifts when one is added; any that is left must be the registry's."""
    numbers = {word: i for i, word in enumerate(["zero", "one", "two", "three", "four", "five", "six", "seven", "eight",
                                                 "nine", "ten", "eleven", "twelve", "thirteen", "fourteen", "fifteen"])}
    readme = (Path(__file__).resolve().parents[1] / "README.md").read_text(encoding="utf-8")
    for count in re.findall(r"\b(\w+) (?:preference )?losses\b", readme):
        value = int(count) if count.isdigit() else numbers.get(count.lower())
        assert value is None or value == len(LOSSES), f"README says {count} losses; the registry has {len(LOSSES)}"
