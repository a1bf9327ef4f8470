"""Pretraining as a stage: random windows of a token shard, next-token cross-entropy, dev bits per byte.

The first stage of every model and the simplest: the batches are `BatchLoader` windows (batch k is a
pure function of the seed and k, so the data position is one integer), every target counts, and the
evaluation is the dev shard's loss and bits per byte. At the end it prints a short sample.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import torch
from torch import nn

from tinylm.checkpoint import TOKENIZER, checkpoint_model_config, load_weights, resolve_checkpoint
from tinylm.config import ModelConfig
from tinylm.data.document_windows import DocumentWindows
from tinylm.data.loader import BatchLoader, iter_sequential
from tinylm.data.shards import read_sidecar
from tinylm.errors import TinyLMError
from tinylm.evaluate.dev_loss import bits_per_byte, evaluate
from tinylm.models.factory import build_model
from tinylm.runtime.device import autocast
from tinylm.runtime.rng import seed_everything
from tinylm.stages.pretrain.config import PretrainConfig
from tinylm.stages.pretrain.data import resolve_data_dir
from tinylm.stages.pretrain.extend import extended_config
from tinylm.stages.pretrain.sample import closing_prompt, sample_text
from tinylm.stages.pretrain.warmups import pretraining_plan
from tinylm.tokenizer import load_tokenizer
from tinylm.train.batch_plan import BatchPlan
from tinylm.train.loop import TrainSummary, run_training
from tinylm.train.stage import Batch, Stage, StageContext, StageLoss, StageStart, lineage


class PretrainStage(Stage[PretrainConfig]):
    name = "pretrain"
    constant_weight = True
    follows_batch_plan = True

    def __init__(self, model_config: ModelConfig | None = None) -> None:
        self.requested_model = model_config  # an exact model instead of the config's preset

    # ---- setup ---------------------------------------------------------------------------------
    def configure(self, start: StageStart[PretrainConfig]) -> ModelConfig:
        """The model (the preset, an exact config, or a weights-only checkpoint's), before any data is read."""
        cfg = start.cfg
        self.extend_from = None
        if cfg.extend is not None:  # a longer context for a trained model: its config with the new window
            self.extend_from = resolve_checkpoint(cfg.extend)
            mcfg, notes = extended_config(checkpoint_model_config(self.extend_from), cfg.overrides)
            for note in notes:
                start.say(f"note: {note}")
            self.say_extension(start, mcfg)
        else:
            mcfg = self.requested_model or cfg.model_config()
        if start.start_from is not None:  # weights only (e.g. `tinylm import`): its model, a fresh optimizer
            mcfg = checkpoint_model_config(start.start_from)
            start.say(f"{start.start_from} holds weights only: training them from step 0 with a fresh optimizer "
                      "(model config taken from the checkpoint)")
        if cfg.gradient_checkpointing and not mcfg.gradient_checkpointing:
            mcfg = mcfg.replace(gradient_checkpointing=True)
        self.mcfg = mcfg
        self.seq_len = cfg.seq_len or mcfg.context_length
        if self.seq_len > mcfg.context_length:
            raise TinyLMError(f"--seq-len {self.seq_len} exceeds the model's context_length {mcfg.context_length}")
        return mcfg

    def setup(self, ctx: StageContext[PretrainConfig]) -> None:
        """The data, once the run's choices are final (after `configure`)."""
        super().setup(ctx)
        cfg, mcfg = ctx.cfg, self.mcfg
        # the data is checked (or prepared) before the model is built: a mismatch fails in a second
        self.data_dir = resolve_data_dir(cfg.data, mcfg, ctx.env, progress=cfg.progress)
        env = ctx.env
        eot = int(read_sidecar(self.data_dir, "train")["eot_id"])
        self.loader = BatchLoader(self.data_dir / "train.bin", cfg.batch_size, self.seq_len, seed=cfg.seed,
                                  rank=env.rank, world_size=env.world_size, device=str(ctx.device),
                                  long_documents_eot=eot if cfg.long_documents else None,
                                  document_ends=cfg.document_ends)
        assert ctx.plan is not None  # the engine's plan, built once: it counts tokens by it, this stage draws by it
        self.plan = ctx.plan
        # eval_batches global batches (eval_batch_size, else batch_size, x world_size rows each): the same dev
        # rows whatever the number of processes; each rank takes every world_size-th micro-batch, an equal share
        dev = list(iter_sequential(self.data_dir / "dev.bin", cfg.eval_batch_size or cfg.batch_size, self.seq_len,
                                   max_batches=cfg.eval_batches * env.world_size))
        if len(dev) >= env.world_size:
            usable = len(dev) - len(dev) % env.world_size
            dev = dev[env.rank:usable:env.world_size]
        self.dev_batches = dev
        sidecar = read_sidecar(self.data_dir, "dev")
        self.dev_tokens, self.dev_bytes = int(sidecar["tokens"]), int(sidecar["bytes"])
        self.corpus = sidecar.get("corpus")  # the closing sample's default prompt depends on it
        # read once: keep_last may prune the checkpoint this run resumed from
        self.lineage = lineage(self.name, ctx.resume, ctx.start_from or self.extend_from, str(self.data_dir),
                               ctx.run_dir)
        if self.extend_from is not None or cfg.long_documents:
            original = self.mcfg.rope_base_context
            # the loader's own spans where it drew them (--long-documents): train.bin is scanned once
            documents = self.loader.documents or DocumentWindows(self.loader.tokens, eot)
            rows = ("rows are the last tokens of those (--long-documents --document-ends)" if cfg.document_ends else
                    "rows are drawn from those alone (--long-documents)" if cfg.long_documents else
                    "a row crosses document boundaries where they are shorter (--long-documents keeps it in one)")
            ctx.say(f"documents: of {len(documents.lengths):,} train documents, {documents.longer_than(original):,} "
                    f"hold a {original}-token row and {documents.longer_than(self.seq_len):,} a {self.seq_len}-token "
                    f"row; {rows}")

    def model_config(self) -> ModelConfig:
        return self.mcfg

    @staticmethod
    def say_extension(start: StageStart[PretrainConfig], mcfg: ModelConfig) -> None:
        rule = mcfg.rope_scaling if mcfg.rope_scaling != "none" else "plain RoPE"
        factor = f" x{mcfg.rope_factor:g}" if mcfg.rope_scaling != "none" else ""
        how = (f"resumed from {start.resume} (its weights and optimizer)" if start.resume is not None
               else "weights only (a fresh optimizer from step 0)")
        start.say(f"extend: {start.cfg.extend} from {mcfg.rope_base_context} to {mcfg.context_length} tokens, "
                  f"{rule}{factor}, {how}")

    def build_model(self) -> nn.Module:
        seed_everything(self.ctx.cfg.seed)  # identical initial weights on every rank
        model = build_model(self.mcfg)
        source = self.ctx.resume or self.ctx.start_from or self.extend_from
        if source is not None:
            load_weights(model, source)
        return model

    def describe(self) -> list[str]:
        lines = [f"data: {self.data_dir}"]
        if self.ctx.cfg.depth_rule is not None:
            lines.append(f"model: {self.ctx.cfg.depth_rule.describe()}")
        if self.ctx.cfg.z_loss:
            lines.append(f"loss: cross-entropy + z-loss {self.ctx.cfg.z_loss:g} * logsumexp^2 (the logged loss "
                         "includes it; dev loss and bits per byte do not)")
        return lines

    def run_name(self, cfg: PretrainConfig) -> str:
        return f"d{cfg.depth}-{cfg.arch}" if cfg.depth is not None else f"{cfg.preset}-{cfg.arch}"

    def model_label(self) -> str:
        cfg = self.ctx.cfg
        return f"depth {cfg.depth}" if cfg.depth is not None else cfg.preset

    def plan_batches(self, cfg: PretrainConfig, seq_len: int, world_size: int) -> BatchPlan:
        return pretraining_plan(cfg, seq_len, world_size)

    def target_reached(self, evaluation: dict[str, float]) -> str | None:
        """--target-dev-bpb: every rank computes the same all-reduced value, so all agree."""
        target, bpb = self.ctx.cfg.target_dev_bpb, evaluation.get("dev_bpb")
        if target is None or bpb is None or bpb > target:
            return None
        return f"an evaluation reached --target-dev-bpb {target}"

    # ---- batches and loss ----------------------------------------------------------------------
    def next_batch(self) -> Batch:
        # the shape of the optimizer step being drawn, by the loop's step: not the loader's micro-batches, which
        # a resume with another --grad-accum would divide differently
        return self.loader.next_batch(*self.plan.shape(self.step))

    def batch_weight(self, batch: Batch) -> int:
        return batch[1].numel()

    def loss(self, model: nn.Module, batch: Batch) -> StageLoss:
        x, y = batch
        _, loss = model(x, y, return_logits=False, z_loss=self.ctx.cfg.z_loss)  # chunked loss: no full logits
        return StageLoss(loss * y.numel(), {})

    def state_dict(self) -> dict[str, Any]:
        return self.loader.state_dict()

    def load_state_dict(self, state: dict[str, Any]) -> None:
        self.loader.load_state_dict(state)  # batch k is a function of k: any world size continues

    # ---- evaluation, checkpoints, the end ------------------------------------------------------
    def evaluate(self, model: nn.Module) -> dict[str, float]:
        if not self.dev_batches:
            return {}
        loss = evaluate(model, self.dev_batches, self.ctx.device, self.ctx.dtype, self.ctx.env)
        return {"dev_loss": loss, "dev_bpb": bits_per_byte(loss, self.dev_tokens, self.dev_bytes)}

    def tokenizer_file(self) -> Path | None:
        return self.data_dir / TOKENIZER

    def checkpoint_meta(self) -> dict[str, Any]:
        return {"stage": self.name, "data": str(self.data_dir), "lineage": self.lineage}

    def finish(self, model: nn.Module, checkpoint: Path | None) -> str | None:
        cfg = self.ctx.cfg
        file = self.tokenizer_file()
        if cfg.sample_tokens <= 0 or cfg.fsdp or file is None or not file.is_file():
            return None  # a sharded model would need every rank in lockstep
        tokenizer = load_tokenizer(file)
        prompt = closing_prompt(cfg.prompt, self.corpus)
        with autocast(self.ctx.device, self.ctx.dtype), torch.no_grad():
            text = sample_text(model, tokenizer, prompt, cfg.sample_tokens, cfg.temperature, cfg.top_k,
                               seed=cfg.seed)
        self.keep_samples([{"prompt": prompt, "reply": text.removeprefix(prompt)}])
        return text


def pretrain(config: PretrainConfig | None = None, *, model_config: ModelConfig | None = None,
             **changes: Any) -> TrainSummary:
    """Pretrain as `config` says (fields can be changed by keyword); `model_config` gives an exact model."""
    return run_training(config, stage=PretrainStage(model_config), **changes)
