"""Reward modelling as a stage: a scalar head learns which of two answers people (or a verifier) prefer.

The model is the base with a score head (models/reward_model.py). Each step scores both sides of a
batch of pairs in one forward over the stacked rows and sums the Bradley-Terry loss
-log sigmoid(r_w - r_l - margin) over the pairs; logged per pair: both scores, their margin and the
share ranked right (accuracy). Evaluation: the same on held-out pairs. The checkpoint holds the
backbone under `backbone.*` and the head as `score.weight` (a LoRA run: the adapters, the head and
its base's name); `load_reward_model` reads it back, with any adapters merged, for scoring and as
RL's `--reward model:PATH`, and interop/hf_reward_export.py writes it as a `transformers`
sequence-classification model.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import torch
from torch import nn

from tinylm.checkpoint import (
    TOKENIZER,
    checkpoint_model_config,
    full_state_dict,
    read_checkpoint_config,
    read_weights,
    resolve_checkpoint,
    reward_checkpoint_weights,
)
from tinylm.errors import TinyLMError
from tinylm.models.factory import build_model
from tinylm.models.reward_model import BACKBONE, RewardModel, bradley_terry_loss, pair_scores
from tinylm.stages.preference.config import RewardConfig
from tinylm.stages.preference.data import PreferenceRow
from tinylm.stages.preference.pair_rows import encode_pairs
from tinylm.stages.preference.pair_stage import PairStage
from tinylm.tokenizer import load_tokenizer
from tinylm.tokenizer.chat_format import ChatFormat
from tinylm.train.stage import Batch, StageLoss

EVAL_SUMS = ("loss", "accuracy", "margin")


class RewardStage(PairStage[RewardConfig]):
    name = "reward"
    evaluate_at_start = True
    width_extra = 0  # the whole sequence, up to and including <|end|>, is the input: seq_len tokens

    def build_model(self) -> nn.Module:
        """FromBaseStage's model (LoRA adapters in it, if asked) as the backbone, under a new score head."""
        model = RewardModel(super().build_model())
        if self.ctx.resume is not None:
            self._resume_reward_model(model, self.ctx.resume)
        self.trainable = sum(p.numel() for p in model.parameters() if p.requires_grad)
        self.total = sum(p.numel() for p in model.parameters())
        self.make_loader()
        return model

    def check_rows(self, rows: list[PreferenceRow], spec: str) -> None:
        """Refuse unpaired rows pointing where they train: this stage has no --loss, so "--loss kto" would mislead."""
        unpaired = sum(not r.paired for r in rows)
        if unpaired:
            raise TinyLMError(f"{spec}: {unpaired} unpaired prompt/completion/label row(s): a reward model needs pairs "
                              "(prompt, chosen, rejected); unpaired answers train with `tinylm dpo --loss kto`")

    def _load_resume(self, model: nn.Module, resume: Path) -> None:
        """Nothing yet: the checkpoint holds the backbone *and* the head, loaded once the head exists."""

    def _resume_reward_model(self, model: RewardModel, resume: Path) -> None:
        stored = read_weights(resume)
        if not self.ctx.cfg.lora_rank:
            model.load_state_dict(full_state_dict(model, stored, resume), strict=True)
            return
        with torch.no_grad():  # adapters, score head and any matrix trained whole
            for name, tensor in model.state_dict().items():
                if name in stored:
                    tensor.copy_(stored[name])

    def checkpoint_weights(self, model: nn.Module, gathered: dict[str, torch.Tensor] | None
                           ) -> dict[str, torch.Tensor] | None:
        if not self.ctx.cfg.lora_rank:
            return gathered
        # the adapters, the head and the matrices trained whole (an untied LM head too: it is frozen here, but
        # it has the grown vocabulary's rows, which the base lacks)
        whole = {BACKBONE + n: self.policy.get_parameter(n).detach() for n in self._trained_whole(self.policy)}
        return {**whole, **{name: p.detach() for name, p in model.named_parameters() if p.requires_grad}}

    def pair_losses(self, model: nn.Module, batch: Batch) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        chosen, rejected = pair_scores(model, batch)
        return bradley_terry_loss(chosen, rejected, self.ctx.cfg.margin), chosen, rejected

    def loss(self, model: nn.Module, batch: Batch) -> StageLoss:
        losses, chosen, rejected = self.pair_losses(model, batch)
        margin = (chosen - rejected).detach()
        metrics = {"score_chosen": chosen.detach().sum(), "score_rejected": rejected.detach().sum(),
                   "reward_margin": margin.sum(), "reward_accuracy": (margin > 0).float().sum()}
        return StageLoss(losses.sum(), metrics)

    def evaluate(self, model: nn.Module) -> dict[str, float]:
        """Held-out Bradley-Terry loss, preference accuracy (r_w > r_l) and mean margin r_w - r_l."""
        def sums(model: nn.Module, batch: Batch) -> list[torch.Tensor]:
            losses, chosen, rejected = self.pair_losses(model, batch)
            margin = chosen - rejected
            return [losses.sum(), (margin > 0).sum(), margin.sum()]

        return self.held_out_means(model, EVAL_SUMS, sums)

    def checkpoint_meta(self) -> dict[str, Any]:
        meta = {**super().checkpoint_meta(), "reward_head": "score", "margin": self.ctx.cfg.margin}
        adapter = meta.pop("adapter", None)  # backbone.* names: not a language model's adapter checkpoint
        if adapter is not None:
            meta["reward_adapter"] = adapter
        return meta

    def finish(self, model: nn.Module, checkpoint: Path | None) -> str | None:
        return None  # no merged language-model copy: this checkpoint is a reward model


def load_reward_model(path: str | Path) -> tuple[RewardModel, Any, dict[str, Any]]:
    """(reward model in eval mode, tokenizer, config.json) of a `tinylm reward` checkpoint; a LoRA run's loads
    as its base with the adapters folded in (a plain model again, as fast as a fully trained one)."""
    ckpt = resolve_checkpoint(path)
    meta = read_checkpoint_config(ckpt)
    if meta.get("reward_head") != "score":
        raise TinyLMError(f"{ckpt} is not a reward model checkpoint (written by tinylm reward)")
    model = RewardModel(build_model(checkpoint_model_config(ckpt)))
    model.load_state_dict(full_state_dict(model, reward_checkpoint_weights(ckpt, meta), ckpt), strict=True)
    tokenizer = load_tokenizer(ckpt / TOKENIZER) if (ckpt / TOKENIZER).is_file() else None
    return model.eval(), tokenizer, {**meta, "path": str(ckpt)}


@torch.no_grad()
def score_answers(model: RewardModel, chat: ChatFormat, prompts: list[list[dict[str, str]]], answers: list[str]
                  ) -> torch.Tensor:
    """r(x, y) [N] for each prompt's answer, as the reward model saw pairs in training (what RL rewards with)."""
    rows = [PreferenceRow(tuple(p), a, None) for p, a in zip(prompts, answers, strict=True)]
    encoded = encode_pairs(rows, chat, model.config.context_length)
    if encoded.dropped:
        raise TinyLMError(f"{encoded.dropped} answer(s) longer than the reward model's context "
                          f"({model.config.context_length} tokens)")
    lengths = encoded.tensors["chosen_length"]
    device = next(model.parameters()).device
    return model(encoded.tensors["chosen_ids"][:, :int(lengths.max())].to(device), lengths.to(device))
