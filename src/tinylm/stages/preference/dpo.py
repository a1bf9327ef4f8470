"""Preference tuning with the DPO family as a stage: learn from pairs directly, no reward model.

Each step reads a batch of pairs, computes the answers' log-probs under the policy in one concatenated
forward (stages/preference/sequence_logprobs.py), takes the reference's from the cache, the adapters-off base
or a frozen copy (stages/preference/reference.py), and sums the chosen loss over the pairs
(stages/preference/losses.py); the engine divides by the step's pairs. KTO's reference point z_0 is
the whole step's, computed in `begin_step` before the first backward (stages/preference/kto_step.py), so
accumulation and torchrun equal one big batch for it too. Logged each step, as means
per pair: the implicit rewards of both sides, their margin, the share of pairs whose chosen reward is
higher (accuracy), and the policy log-probs. Evaluation: the same on held-out pairs, and for built-in
tasks the verifier's exact-match with greedy decoding, before the first step and every --eval-every.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import torch
from torch import nn

from tinylm.checkpoint import TOKENIZER, checkpoint_model_config, load_weights, resolve_checkpoint
from tinylm.errors import TinyLMError
from tinylm.models.factory import build_model
from tinylm.models.vocab_growth import init_token_rows
from tinylm.stages.preference.config import DPOConfig
from tinylm.stages.preference.data import PreferenceRow
from tinylm.stages.preference.kto_step import REFERENCE_POINT, step_reference_point
from tinylm.stages.preference.losses import PairLogps, PairLoss, pair_loss
from tinylm.stages.preference.pair_stage import PairStage
from tinylm.stages.preference.reference import (
    adapters_disabled,
    cache_reference_logprobs,
    reference_logprobs,
)
from tinylm.stages.preference.sequence_logprobs import pair_logprobs
from tinylm.train.stage import Batch, StageContext, StageLoss

# held-out means: the loss, the implicit-reward accuracy and margin, and the share of pairs whose chosen answer
# the policy itself finds likelier (log pi(y_w|x) > log pi(y_l|x)), meaningful before any step too
EVAL_SUMS = ("loss", "accuracy", "margin", "logp_accuracy", "paired")
KTO_SUMS = ("label_right", "sides")  # KTO: answers on their label's side of z_0, and the answers
PAIR_SCORES = ("dev_accuracy", "dev_margin", "dev_logp_accuracy")


def pair_means(means: dict[str, float]) -> dict[str, float]:
    """Per-row means -> the scores: the pair scores over the paired rows (none when none is), KTO's over answers."""
    share = means.pop("dev_paired", 0.0)
    scores = {k: v for k, v in means.items() if k not in PAIR_SCORES}
    if share > 0:
        scores.update({k: means[k] / share for k in PAIR_SCORES if k in means})
    if "dev_sides" in means:
        sides = scores.pop("dev_sides")
        scores["dev_label_accuracy"] = scores.pop("dev_label_right") / sides if sides > 0 else 0.0
    return scores


class DPOStage(PairStage[DPOConfig]):
    name = "dpo"
    evaluate_at_start = True

    def setup(self, ctx: StageContext[DPOConfig]) -> None:
        cfg = ctx.cfg
        self.spec, self.params = cfg.loss_spec()
        self.mode = cfg.reference_mode()
        super().setup(ctx)
        self.ref_path = self._reference_checkpoint(cfg) if self.mode is not None else None
        if self.mode == "adapters" and self.added_tokens:
            raise TinyLMError(f"{self.base} lacks the chat tokens, so under LoRA its embedding trains whole and the "
                              "adapters-off model is no longer the reference: use --reference cached")

    def check_rows(self, rows: list[PreferenceRow], spec: str) -> None:
        if not self.spec.unpaired:
            super().check_rows(rows, spec)

    def _reference_checkpoint(self, cfg: DPOConfig) -> Path:
        """--ref (checked to share the policy's vocabulary and tokenizer), or the base."""
        if not cfg.ref:
            return self.base
        path = resolve_checkpoint(cfg.ref)
        ref_vocab = checkpoint_model_config(path).vocab_size
        same_tokenizer = (path / TOKENIZER).is_file() and \
            (path / TOKENIZER).read_bytes() == (self.base / TOKENIZER).read_bytes()
        if ref_vocab != self.mcfg.vocab_size or not same_tokenizer:
            raise TinyLMError(f"reference {path} does not match the policy's vocabulary (vocab_size {ref_vocab} vs "
                              f"{self.mcfg.vocab_size}{'' if same_tokenizer else ', another tokenizer'})")
        return path

    # ---- the model and its reference --------------------------------------------------------------
    def build_model(self) -> nn.Module:
        """The policy (FromBaseStage's), and pi_ref as the mode says: cached log-probs or a frozen copy."""
        model = super().build_model()
        ctx = self.ctx
        if self.mode == "cached":  # once, before any update: the reference's log-probs of every pair
            reference = self._reference_model().to(ctx.device)
            for rows in (self.train_rows, self.dev_rows):
                rows.tensors = cache_reference_logprobs(reference, rows.tensors, 4 * ctx.cfg.batch_size, ctx.device,
                                                        ctx.dtype)
            del reference  # nothing of it stays in memory but two numbers per pair
        elif self.mode == "copy":
            self.reference = self._reference_model().requires_grad_(False).eval().to(ctx.device)
        self.make_loader()
        return model

    def _reference_model(self) -> nn.Module:
        """--ref, or the starting model: the base's weights with the chat rows (never a resumed run's weights)."""
        assert self.ref_path is not None
        if self.ref_path != self.base:
            reference = build_model(checkpoint_model_config(self.ref_path))
            load_weights(reference, self.ref_path)
            return reference
        reference = build_model(self.base_config)
        load_weights(reference, self.base)
        added_ids = [self.tokenizer.token_to_id(t) for t in self.added_tokens]
        init_token_rows(reference, [i for i in added_ids if i is not None], self.known_rows)
        reference.config = self.mcfg
        return reference

    def reference_batch(self, batch: Batch) -> tuple[torch.Tensor, torch.Tensor] | tuple[None, None]:
        if self.mode is None:
            return None, None
        if self.mode == "cached" or "ref_chosen" in batch:  # cached, or kept by KTO's pre-pass (begin_step)
            return batch["ref_chosen"], batch["ref_rejected"]
        if self.mode == "copy":
            return reference_logprobs(self.reference, batch)
        with adapters_disabled(self.policy):
            return reference_logprobs(self.policy, batch)

    # ---- loss -------------------------------------------------------------------------------------
    def pair_logps(self, model: nn.Module, batch: Batch) -> PairLogps:
        chosen, rejected, n_chosen, n_rejected = pair_logprobs(model, batch)
        ref_chosen, ref_rejected = self.reference_batch(batch)
        return PairLogps(chosen, rejected, n_chosen, n_rejected, ref_chosen, ref_rejected,
                         batch["chosen_present"], batch["rejected_present"])

    def pair_losses(self, model: nn.Module, batch: Batch) -> tuple[PairLoss, PairLogps]:
        """The chosen loss of each pair; KTO reads the z_0 its batch carries (the step's), if any."""
        p = self.pair_logps(model, batch)
        params = self.params if REFERENCE_POINT not in batch else {**self.params, "reference_point":
                                                                   batch[REFERENCE_POINT]}
        return pair_loss(self.ctx.cfg.loss, p, params), p

    def begin_step(self, model: nn.Module, batches: list[Batch]) -> None:
        """KTO: the step's z_0 over all its micro-batches and ranks, given to each (stages/preference/kto_step.py)."""
        if self.ctx.cfg.loss != "kto":
            return
        z0 = step_reference_point(model, batches, self._logps_keeping_reference, self.ctx.env, self.ctx.device,
                                  self.ctx.dtype)
        for batch in batches:
            batch[REFERENCE_POINT] = z0

    def _logps_keeping_reference(self, model: nn.Module, batch: Batch) -> PairLogps:
        p = self.pair_logps(model, batch)
        batch["ref_chosen"], batch["ref_rejected"] = p.ref_chosen, p.ref_rejected  # pi_ref is frozen: reuse
        return p

    def loss(self, model: nn.Module, batch: Batch) -> StageLoss:
        out, p = self.pair_losses(model, batch)
        margin = out.chosen_rewards - out.rejected_rewards
        metrics = {"reward_chosen": out.chosen_rewards.sum(), "reward_rejected": out.rejected_rewards.sum(),
                   "reward_margin": margin.sum(), "reward_accuracy": (margin > 0).float().sum(),
                   "logp_chosen": p.chosen.detach().sum(), "logp_rejected": p.rejected.detach().sum()}
        if REFERENCE_POINT in batch:  # logged as the step's z_0 (a sum over pairs, like every metric)
            metrics["kto_z0"] = batch[REFERENCE_POINT] * len(p.chosen)
        return StageLoss(out.losses.sum(), metrics)

    # ---- evaluation -------------------------------------------------------------------------------
    def held_out_scores(self, model: nn.Module) -> dict[str, float]:
        """Means over the held-out rows of EVAL_SUMS (preference accuracy: implicit reward margin > 0); KTO's z_0
        is the whole held-out set's, so the held-out loss does not depend on the batch size or ranks either.

        The pair scores count the rows with both sides alone (an unpaired KTO row has no pair to rank), and are
        left out when there is none; KTO adds what it optimises: the share of answers on their label's side of
        z_0 (a desirable one's log-ratio above it, an undesirable one's below)."""
        shared: dict[str, torch.Tensor] = {}
        kto = self.ctx.cfg.loss == "kto"
        if kto:
            shared[REFERENCE_POINT] = step_reference_point(model, self.dev_batches(), self.pair_logps,
                                                           self.ctx.env, self.ctx.device, self.ctx.dtype)

        def sums(model: nn.Module, batch: Batch) -> list[torch.Tensor]:
            out, p = self.pair_losses(model, {**batch, **shared})
            margin = out.chosen_rewards - out.rejected_rewards
            has_w, has_l = batch["chosen_present"], batch["rejected_present"]
            paired = has_w * has_l
            pair_sums = [out.losses.sum(), ((margin > 0) * paired).sum(), (margin * paired).sum(),
                         ((p.chosen > p.rejected) * paired).sum(), paired.sum()]
            if not kto:
                return pair_sums
            rho_w, rho_l = p.ratios()
            z0 = shared[REFERENCE_POINT]
            right = has_w * (rho_w > z0) + has_l * (rho_l < z0)
            return [*pair_sums, right.sum(), (has_w + has_l).sum()]

        means = self.held_out_means(model, (*EVAL_SUMS, *(KTO_SUMS if kto else ())), sums)
        return pair_means(means)

    def evaluate(self, model: nn.Module) -> dict[str, float]:
        return {**self.held_out_scores(model), **self.held_out_exact_match(model)}

    def describe(self) -> list[str]:
        cfg = self.ctx.cfg
        params = ", ".join(f"{k} {v:g}" for k, v in self.params.items())
        reference = "none (reference-free)" if self.mode is None else f"{self.mode} ({self.ref_path})"
        return [*super().describe(), f"loss: {cfg.loss} ({params}; {self.spec.paper})", f"reference: {reference}"]

    def checkpoint_meta(self) -> dict[str, Any]:
        cfg = self.ctx.cfg
        return {**super().checkpoint_meta(), "preference_loss": {"name": cfg.loss, **self.params},
                "reference": str(self.ref_path) if self.ref_path else None}
