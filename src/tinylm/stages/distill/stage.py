"""Distillation as a stage: the student learns the teacher's next-token distributions, not only the data's tokens.

On every trained token t (all of a text row, an assistant's tokens in a conversation, the student's own
samples on an on-policy micro-batch) the loss is

    l_t = (1 - w) D(p_teacher(. | x_<t) || p_student(. | x_<t)) + w (-log p_student(x_t | x_<t))

with D the chosen divergence at temperature T (`divergences.py`) and w = --ce-weight; a token the
student sampled itself has no data token, so its loss is D alone. The engine divides the summed loss by
the step's trained tokens, as for SFT. The teacher is frozen and runs under the run's autocast dtype, with
no graph; its logits come from its forward on the same ids, or from the logit cache (`logit_cache.py`).

Logged: the divergence, the cross-entropy part and the top-1 agreement with the teacher (each per trained
token), and the share of on-policy tokens; held out: the same three and, on text, bits per byte, and on a
task, exact-match.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import torch
import torch.nn.functional as F
from torch import nn

from tinylm.checkpoint import load_weights
from tinylm.config import ModelConfig
from tinylm.data.packing import IGNORE
from tinylm.data.row_loader import RowLoader
from tinylm.evaluate.dev_loss import bits_per_byte
from tinylm.evaluate.exact_match import exact_match
from tinylm.models.factory import build_model
from tinylm.runtime.compile_policy import eager_blocks
from tinylm.runtime.device import autocast
from tinylm.runtime.distributed import all_reduce_sum
from tinylm.runtime.rng import seed_everything
from tinylm.stages.distill.config import DistillConfig
from tinylm.stages.distill.divergences import TeacherTopK, token_divergence, top1_agreement, top_k_of
from tinylm.stages.distill.on_policy import on_policy_draw, prompt_picks, sample_batch
from tinylm.stages.distill.setup import DistillSetup, ModelPlan, plan_models, prepare
from tinylm.stages.rl.rollout import stable_seed  # one seed mixer for every sampled row
from tinylm.train.stage import Batch, Stage, StageContext, StageLoss, StageStart


class DistillStage(Stage[DistillConfig]):
    name = "distill"
    evaluate_at_start = True  # the student's starting divergence is the "before"
    # on `tinylm pipeline`, only when its `stages` name it: the road's SFT model learns on-policy from its GRPO model
    road_optional = True
    road_inputs = {"base": "sft", "teacher": "grpo", "data": "task"}
    metric_notes = {
        "divergence": ("nats", "the divergence to the teacher (--divergence), mean per trained token"),
        "ce": ("nats", "cross-entropy to the data's next token, mean per trained token (--ce-weight mixes it in)"),
        "agreement": ("0-1", "share of trained tokens where the student's top token is the teacher's"),
        "on_policy": ("0-1", "share of the step's tokens the student sampled itself (--on-policy)"),
        "dev_divergence": ("nats", "the divergence to the teacher on held-out rows, mean per token"),
        "dev_agreement": ("0-1", "top-1 agreement with the teacher on held-out rows"),
    }

    def configure(self, start: StageStart[DistillConfig]) -> ModelConfig:
        """The teacher, the tokenizer and the student's model: the data waits for the run's final dtype."""
        self.plan: ModelPlan = plan_models(start)
        return self.plan.student_config

    def setup(self, ctx: StageContext[DistillConfig]) -> None:
        super().setup(ctx)
        self.prepared: DistillSetup = prepare(ctx, self.plan)
        self.data = self.prepared.data
        assert self.data is not None
        self.loader = RowLoader(self.data.train, ctx.cfg.batch_size, seed=ctx.cfg.seed, rank=ctx.env.rank,
                                world_size=ctx.env.world_size, device=ctx.device)

    def model_config(self) -> ModelConfig:
        return self.prepared.student_config

    def describe(self) -> list[str]:
        return self.prepared.header

    def run_name(self, cfg: DistillConfig) -> str:
        student = Path(cfg.base).name if cfg.base else f"{cfg.preset}-{cfg.arch}"
        return f"{student}-distill"

    def model_label(self) -> str:
        cfg = self.ctx.cfg
        return f"student from {cfg.base}" if cfg.base else f"{cfg.preset} student"

    # ---- the model -----------------------------------------------------------------------------
    def build_model(self) -> nn.Module:
        seed_everything(self.ctx.cfg.seed)
        model = build_model(self.prepared.student_config)
        source = self.ctx.resume or self.prepared.base
        if source is not None:
            load_weights(model, source)
        return model

    # ---- batches -------------------------------------------------------------------------------
    def draw_step(self, step: int, micro_batches: int) -> list[Batch]:
        """Each micro-batch from the data, or (with --on-policy) a marker the step's `begin_step` fills with the
        student's own samples."""
        self.step = step
        cfg = self.ctx.cfg
        batches: list[Batch] = []
        for micro in range(micro_batches):
            if on_policy_draw(cfg.seed, step, micro, cfg.on_policy):
                batches.append({"on_policy_micro": micro})
            else:
                batches.append(self.loader.next_batch())
        return batches

    def begin_step(self, model: nn.Module, batches: list[Batch]) -> None:
        """Sample the on-policy micro-batches with the current weights (the raw model, before any backward)."""
        cfg, p, env = self.ctx.cfg, self.prepared, self.ctx.env
        for batch in batches:
            if "on_policy_micro" not in batch:
                continue
            micro = batch.pop("on_policy_micro")
            picks = prompt_picks(cfg.seed, self.step, micro, env.rank, env.world_size, len(self.data.prompts),
                                 cfg.batch_size)
            seeds = [stable_seed(cfg.seed, self.step, micro, row) for row, _ in picks]
            with torch.no_grad(), autocast(self.ctx.device, self.ctx.dtype), eager_blocks():
                sampled = sample_batch(model, [self.data.prompts[i] for _, i in picks], seeds, cfg.max_new_tokens,
                                       p.stop_ids, p.pad_id)
            batch.update({k: v.to(self.ctx.device) for k, v in sampled.items()})

    def next_batch(self) -> Batch:
        return self.loader.next_batch()

    def batch_weight(self, batch: Batch) -> int:
        return int((batch["targets"] != IGNORE).sum())

    def batch_tokens(self, batch: Batch) -> int | None:
        return int(batch["idx"].numel())

    # ---- the loss ------------------------------------------------------------------------------
    def teacher_view(self, batch: Batch, mask: torch.Tensor, split: str) -> Any:
        """The teacher's logits at the masked positions [n, V], or its cached top-k there."""
        p = self.prepared
        if p.cache is not None and "row" in batch:
            top = p.cache.lookup(split, batch["row"], mask)
            k = self.ctx.cfg.top_k
            return TeacherTopK(top.ids[..., :k], top.logprobs[..., :k]) if k else top  # sorted: the first k
        assert p.teacher_model is not None  # prepare() loads it whenever no cache answers
        with torch.no_grad():
            logits, _ = p.teacher_model(batch["idx"], positions=batch.get("positions"),
                                        segments=batch.get("segments"), logits_at=mask)
        return top_k_of(logits, self.ctx.cfg.top_k) if self.ctx.cfg.top_k else logits

    def token_losses(self, model: nn.Module, batch: Batch, split: str) -> dict[str, torch.Tensor]:
        """Per trained token: the divergence, the cross-entropy and the top-1 agreement (summed)."""
        cfg = self.ctx.cfg
        mask = batch["targets"] != IGNORE
        logits, _ = model(batch["idx"], positions=batch.get("positions"), segments=batch.get("segments"),
                          logits_at=mask)
        teacher = self.teacher_view(batch, mask, split)
        divergence = token_divergence(logits, teacher, cfg.divergence, cfg.beta, cfg.temperature)
        ce = F.cross_entropy(logits.float(), batch["targets"][mask], reduction="none")
        return {"divergence": divergence.sum(), "ce": ce.sum(), "agreement": top1_agreement(logits, teacher).sum(),
                "n": torch.tensor(float(mask.sum()), device=logits.device)}

    def loss(self, model: nn.Module, batch: Batch) -> StageLoss:
        w = self.ctx.cfg.ce_weight
        parts = self.token_losses(model, batch, "train")
        on_policy = "sample_logprobs" in batch
        total = parts["divergence"] if on_policy else (1 - w) * parts["divergence"] + w * parts["ce"]
        metrics = {"divergence": parts["divergence"].detach(), "ce": parts["ce"].detach(),
                   "agreement": parts["agreement"].detach(), "on_policy": parts["n"] * float(on_policy)}
        return StageLoss(total, metrics)

    def state_dict(self) -> dict[str, Any]:
        return self.loader.state_dict()

    def load_state_dict(self, state: dict[str, Any]) -> None:
        self.loader.load_state_dict(state)

    # ---- evaluation ----------------------------------------------------------------------------
    @torch.no_grad()
    def evaluate(self, model: nn.Module) -> dict[str, float]:
        ctx = self.ctx
        dev, env = self.data.dev, ctx.env
        result: dict[str, float] = {}
        if dev:
            totals = torch.zeros(4, dtype=torch.float64, device=ctx.device)
            was_training = model.training
            model.eval()
            batch, n = ctx.cfg.batch_size, len(dev["idx"])
            for first in range(env.rank * batch, n, batch * env.world_size):
                rows = {k: v[first:first + batch].to(ctx.device) for k, v in dev.items()}
                with autocast(ctx.device, ctx.dtype):
                    parts = self.token_losses(model, rows, "dev")
                totals += torch.stack([parts[k].double() for k in ("divergence", "ce", "agreement", "n")])
            model.train(was_training)
            all_reduce_sum(totals, env)
            if totals[3] > 0:
                divergence, ce, agreement = (float(totals[i] / totals[3]) for i in range(3))
                result.update(dev_divergence=divergence, dev_loss=ce, dev_agreement=agreement)
                if self.data.kind == "text":
                    result["dev_bpb"] = bits_per_byte(ce, self.data.dev_tokens, self.data.dev_bytes)
        return {**result, **self._exact_match(model)}

    def _exact_match(self, model: nn.Module) -> dict[str, float]:
        p = self.prepared
        if self.data.task is None or not self.data.eval_problems or not self.ctx.env.is_main or self.ctx.cfg.fsdp:
            return {}
        with torch.no_grad(), autocast(self.ctx.device, self.ctx.dtype), eager_blocks():
            score = exact_match(model, p.chat, self.data.task, self.data.eval_problems, self.ctx.cfg.max_new_tokens)
        self.keep_samples([{"prompt": q, "reply": r, "verified": ok} for q, r, ok in score.samples])
        return {"exact_match": score.accuracy}

    # ---- checkpoints ---------------------------------------------------------------------------
    def tokenizer_file(self) -> Path | None:
        return self.prepared.tokenizer_path

    def checkpoint_meta(self) -> dict[str, Any]:
        cfg, p = self.ctx.cfg, self.prepared
        meta: dict[str, Any] = {"stage": self.name, "data": p.data_spec, "teacher": p.teacher_path,
                                "distill": {"divergence": cfg.divergence, "beta": cfg.beta,
                                            "temperature": cfg.temperature, "top_k": cfg.top_k,
                                            "ce_weight": cfg.ce_weight, "on_policy": cfg.on_policy},
                                "lineage": p.lineage}
        if p.chat is not None:
            meta["chat_template"] = p.chat.jinja_template()
        return meta

