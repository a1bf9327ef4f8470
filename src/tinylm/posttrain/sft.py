"""Supervised fine-tuning (SFT) as a stage: learn the assistant's side of conversations.

The base model continues text; SFT teaches it a turn structure. Each conversation is rendered by
the chat format into ids and a loss mask (1 on assistant content and the end-of-turn token that
closes it, so the model learns what to say *and* when to stop), packed several to a row, and the
loss is the cross-entropy summed over masked-in targets only:

    L = - sum_{t : mask_t = 1} log p(x_t | x_<t, same conversation)   /   #{t : mask_t = 1}

where the division is by the step's whole count (`train/step.py`), so a long answer weighs as
many tokens as it has. Everything else (schedule, accumulation, checkpoints, exact resume,
torchrun) is the one engine's.

Where the base tokenizer lacks the chat tokens (an older run, r50k, an imported model) they are
added and the embedding grows with mean-initialised rows (`posttrain/vocab_growth.py`). With
`--lora-rank R` the base is frozen and only LoRA adapters train (`posttrain/lora.py`); checkpoints
then hold the adapters alone and name their base.
"""

from __future__ import annotations

import hashlib
import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch
from torch import nn

from tinylm.checkpoint import (
    TOKENIZER,
    checkpoint_model_config,
    load_weights,
    read_checkpoint_config,
    read_weights,
    resolve_checkpoint,
)
from tinylm.config import ModelConfig
from tinylm.device import autocast
from tinylm.errors import TinyLMError
from tinylm.models.factory import build_model
from tinylm.posttrain.packing import IGNORE
from tinylm.train.config import TrainConfig
from tinylm.train.distributed import all_reduce_sum
from tinylm.train.rng import seed_everything
from tinylm.train.stage import Batch, Stage, StageContext, StageLoss, lineage

ON_ERROR = ("stop", "skip")


@dataclass
class SFTConfig(TrainConfig):
    """TrainConfig plus what SFT needs; the defaults fine-tune the demo model on `builtin:arith` in minutes."""

    base: str = ""  # the checkpoint (or run folder) to fine-tune
    data: str | None = "builtin:arith"  # a data spec: builtin:NAME, a JSONL file, hf:NAME
    eval_data: str | None = None  # a held-out spec; default: the task's test split, or a share of the data
    dev_fraction: float = 0.05  # share of a file's conversations held out when there is no --eval-data
    train_examples: int = 20_000  # conversations generated for a builtin task
    eval_examples: int = 200  # held-out problems scored by exact-match (builtin tasks)
    max_new_tokens: int = 32  # reply length limit when scoring exact-match
    packing: bool = True
    on_error: str = "stop"  # a malformed row: stop with file:line, or skip and count it
    lora_rank: int = 0  # 0 = full fine-tuning
    lora_alpha: float | None = None
    lora_dropout: float = 0.0
    lora_targets: str = "q,k,v,o,gate,up,down"
    rslora: bool = False
    # SFT-sized defaults of the shared options
    max_steps: int = 300
    lr: float = 1e-3
    weight_decay: float = 0.0
    warmup_steps: int = 10
    eval_every: int = 100
    checkpoint_every: int = 0
    sample_tokens: int = 0

    def validate(self) -> None:
        super().validate()
        if not self.base:
            raise TinyLMError("--base is required: the checkpoint or run folder to fine-tune")
        if not self.data:
            raise TinyLMError("--data is required: builtin:arith, a JSONL file or hf:NAME")
        if not 0 < self.dev_fraction < 1:
            raise TinyLMError(f"--dev-fraction must be in (0, 1), got {self.dev_fraction}")
        for name in ("train_examples", "eval_examples", "max_new_tokens"):
            if getattr(self, name) < 1:
                raise TinyLMError(f"--{name.replace('_', '-')} must be >= 1 (got {getattr(self, name)})")
        if self.on_error not in ON_ERROR:
            raise TinyLMError(f"--on-error must be stop or skip, got {self.on_error!r}")
        if self.lora_rank < 0:
            raise TinyLMError(f"--lora-rank must be > 0 (or 0 for full fine-tuning), got {self.lora_rank}")
        if self.lora_rank:
            self.lora_config().validate()

    def lora_config(self) -> Any:
        from tinylm.posttrain.lora import LoraConfig, parse_targets

        return LoraConfig(rank=self.lora_rank, alpha=self.lora_alpha, dropout=self.lora_dropout,
                          targets=parse_targets(self.lora_targets), rslora=self.rslora)


def _held_out(conversation: list[dict[str, str]], fraction: float) -> bool:
    """A stable hash of the conversation decides its split: the same one lands in the same split every run."""
    digest = hashlib.blake2b(json.dumps(conversation, sort_keys=True).encode("utf-8"), digest_size=8).digest()
    return int.from_bytes(digest, "big") < fraction * 2**64


class SFTStage(Stage):
    name = "sft"
    evaluate_at_start = True  # the base's score is the "before" of the run

    def __init__(self) -> None:
        self.task: Any = None
        self.eval_problems: list[Any] = []

    # ---- setup: base, tokenizer, data ----------------------------------------------------------
    def setup(self, ctx: StageContext) -> None:
        super().setup(ctx)
        cfg: SFTConfig = ctx.cfg  # type: ignore[assignment]
        self.base = resolve_checkpoint(cfg.base)
        self._prepare_tokenizer(ctx)
        self.seq_len = cfg.seq_len or self.mcfg.context_length
        if self.seq_len > self.mcfg.context_length:
            raise TinyLMError(f"--seq-len {self.seq_len} exceeds the model's context_length "
                              f"{self.mcfg.context_length}")
        train, dev = self._conversations(cfg)
        self.train_rows, train_report = self._rows(train, "train")
        self.dev_rows, dev_report = self._rows(dev, "dev")
        self.report = [train_report, dev_report]
        from tinylm.posttrain.row_loader import RowLoader

        env = ctx.env
        self.loader = RowLoader(self.train_rows, cfg.batch_size, seed=cfg.seed, rank=env.rank,
                                world_size=env.world_size, device=ctx.device)
        # read once: keep_last may prune the checkpoint this run resumed from
        self.lineage = lineage(self.name, ctx.resume, self.base, str(cfg.data), ctx.run_dir)

    def _prepare_tokenizer(self, ctx: StageContext) -> None:
        """The base's tokenizer with the chat tokens (added if missing) and the model config that fits it."""
        from tinylm.posttrain.chat_format import ChatFormat
        from tinylm.tokenizer import load_tokenizer
        from tinylm.tokenizer.chat_tokens import with_chat_tokens

        if not (self.base / TOKENIZER).is_file():
            raise TinyLMError(f"base checkpoint {self.base} has no {TOKENIZER}: SFT needs the base's tokenizer")
        base_tokenizer = load_tokenizer(self.base / TOKENIZER)
        tokenizer, self.added_tokens = with_chat_tokens(base_tokenizer)
        self.known_rows = base_tokenizer.n_vocab  # rows of tokens the base model has seen
        self.chat = ChatFormat.from_tokenizer(tokenizer)
        self.tokenizer = tokenizer
        base_cfg = checkpoint_model_config(self.base)
        if ctx.cfg.gradient_checkpointing:
            base_cfg = base_cfg.replace(gradient_checkpointing=True)
        self.base_config = base_cfg
        self.mcfg = base_cfg.replace(vocab_size=max(base_cfg.vocab_size, tokenizer.n_vocab))
        self.tokenizer_path = ctx.run_dir / TOKENIZER
        if ctx.env.is_main:
            ctx.run_dir.mkdir(parents=True, exist_ok=True)
            tokenizer.save(self.tokenizer_path)
        if self.added_tokens:
            ctx.say(f"added the chat token(s) {', '.join(self.added_tokens)} to {base_tokenizer.name}: their "
                    "embedding rows start at the mean of the known rows")

    def _conversations(self, cfg: SFTConfig) -> tuple[list[list[dict[str, str]]], list[list[dict[str, str]]]]:
        from tinylm.posttrain.sft_data import load_conversations

        spec = cfg.data or ""
        if spec.startswith("builtin:"):
            from tinylm.tasks.registry import get_task

            self.task = get_task(spec)
            train = load_conversations(spec, "train", seed=cfg.seed, limit=cfg.train_examples).conversations
            self.eval_problems = self.task.examples("test", cfg.eval_examples, cfg.seed)
            dev = [list(map(dict, e.messages)) for e in self.eval_problems]
            return train, dev
        loaded = load_conversations(spec, "train", seed=cfg.seed, on_error=cfg.on_error)
        if loaded.skipped:
            self.ctx.say(f"skipped {len(loaded.skipped)} malformed row(s) of {spec}; first: {loaded.skipped[0]}")
        if cfg.eval_data:
            dev = load_conversations(cfg.eval_data, "test", seed=cfg.seed, on_error=cfg.on_error).conversations
            return loaded.conversations, dev
        train = [c for c in loaded.conversations if not _held_out(c, cfg.dev_fraction)]
        dev = [c for c in loaded.conversations if _held_out(c, cfg.dev_fraction)]
        if not train:
            raise TinyLMError(f"{spec}: every conversation fell into the held-out share; lower --dev-fraction")
        return train, dev

    def _rows(self, conversations: list[list[dict[str, str]]], split: str) -> tuple[dict[str, torch.Tensor], str]:
        """Rendered, checked, packed (or padded) rows as tensors, and a line that says what happened."""
        from tinylm.posttrain.packing import as_tensors, count_truncated, pack, padding_waste, unpacked

        examples, nothing_to_learn = [], 0
        for messages in conversations:
            rendered = self.chat.render(messages)
            if rendered.n_learn == 0:
                nothing_to_learn += 1  # counted and skipped, never silently trained on
                continue
            examples.append((rendered.ids, rendered.mask))
        if not examples:
            if split == "dev":
                return {}, "dev: no held-out conversations"
            raise TinyLMError(f"{self.ctx.cfg.data}: no conversation has assistant content to learn "
                              f"({nothing_to_learn} skipped)")
        eot = self.tokenizer.eot_id
        packed, padded = pack(examples, self.seq_len, eot), unpacked(examples, self.seq_len, eot)
        rows = packed if self.ctx.cfg.packing else padded
        truncated = count_truncated(examples, self.seq_len)
        line = (f"{split}: {len(examples):,} conversations -> {len(rows):,} rows of {self.seq_len} "
                f"({'packed' if self.ctx.cfg.packing else 'one per row'}); padding {padding_waste(packed):.1%} "
                f"packed vs {padding_waste(padded):.1%} one per row")
        if nothing_to_learn:
            line += f"; {nothing_to_learn} with nothing to learn skipped"
        if truncated:
            line += f"; {truncated} longer than a row truncated"
        return as_tensors(rows), line

    def model_config(self) -> ModelConfig:
        return self.mcfg

    def describe(self) -> list[str]:
        cfg: SFTConfig = self.ctx.cfg  # type: ignore[assignment]
        lines = [f"base: {self.base}", f"data: {cfg.data}", *self.report]
        if cfg.lora_rank:
            lines.append(f"LoRA: rank {cfg.lora_rank}, targets {cfg.lora_targets}: "
                         f"{self.trainable:,} trainable parameters of {self.total:,}")
        return lines

    # ---- the model -----------------------------------------------------------------------------
    def build_model(self) -> nn.Module:
        from tinylm.posttrain.vocab_growth import init_token_rows

        cfg: SFTConfig = self.ctx.cfg  # type: ignore[assignment]
        seed_everything(cfg.seed)  # the same adapter initialisation on every rank and every resume
        model = build_model(self.base_config)
        load_weights(model, self.base)
        added_ids = [self.tokenizer.token_to_id(t) for t in self.added_tokens]
        init_token_rows(model, [i for i in added_ids if i is not None], self.known_rows)
        model.config = self.mcfg  # gradient checkpointing and the grown vocabulary
        if cfg.lora_rank:
            from tinylm.posttrain.lora import apply_lora

            apply_lora(model, cfg.lora_config())
            for name in self._trained_whole(model):  # the added tokens' rows must learn: LoRA cannot reach them
                model.get_parameter(name).requires_grad_(True)
        resume = self.ctx.resume
        if resume is not None:
            self._load_resume(model, resume)
        self.model = model
        self.trainable = sum(p.numel() for p in model.parameters() if p.requires_grad)
        self.total = sum(p.numel() for p in model.parameters())
        return model

    def _trained_whole(self, model: nn.Module) -> list[str]:
        """Under LoRA, the embedding (and an untied head) when chat tokens were added: their new rows start at
        the mean and only training moves them, so these matrices train whole and are saved with the adapters."""
        if not self.added_tokens:
            return []
        names = ["token_embed.weight"]
        if model.lm_head.weight is not model.token_embed.weight:
            names.append("lm_head.weight")
        return names

    def _load_resume(self, model: nn.Module, resume: Path) -> None:
        if not self.ctx.cfg.lora_rank:  # type: ignore[attr-defined]
            load_weights(model, resume)
            return
        from tinylm.posttrain.lora import load_lora_state_dict

        stored = read_weights(resume)
        whole = self._trained_whole(model)
        load_lora_state_dict(model, {k: v for k, v in stored.items() if k not in whole})
        with torch.no_grad():
            for name in whole:
                model.get_parameter(name).copy_(stored[name])

    def checkpoint_weights(self, model: nn.Module, gathered: dict[str, torch.Tensor] | None
                           ) -> dict[str, torch.Tensor] | None:
        if not self.ctx.cfg.lora_rank:  # type: ignore[attr-defined]
            return gathered
        from tinylm.posttrain.lora import lora_state_dict

        # adapter-only (the base is named in config.json), plus matrices trained whole
        return {**lora_state_dict(model), **{n: model.get_parameter(n).detach() for n in self._trained_whole(model)}}

    # ---- batches and loss ----------------------------------------------------------------------
    def next_batch(self) -> Batch:
        return self.loader.next_batch()

    def batch_weight(self, batch: Batch) -> int:
        return int((batch["targets"] != IGNORE).sum())

    def loss(self, model: nn.Module, batch: Batch) -> StageLoss:
        _, total = model(batch["idx"], batch["targets"], return_logits=False, positions=batch["positions"],
                         segments=batch["segments"], reduction="sum")
        return StageLoss(total, {})

    def state_dict(self) -> dict[str, Any]:
        return self.loader.state_dict()

    def load_state_dict(self, state: dict[str, Any]) -> None:
        self.loader.load_state_dict(state)

    # ---- evaluation ----------------------------------------------------------------------------
    @torch.no_grad()
    def dev_loss(self, model: nn.Module) -> float | None:
        """Mean loss per assistant token over the held-out rows (each rank a share, summed)."""
        if not self.dev_rows:
            return None
        ctx = self.ctx
        env = ctx.env
        n = len(self.dev_rows["idx"])
        totals = torch.zeros(2, dtype=torch.float64, device=ctx.device)
        was_training = model.training
        model.eval()
        batch = ctx.cfg.batch_size
        for first in range(env.rank * batch, n, batch * env.world_size):
            rows = {k: v[first:first + batch].to(ctx.device) for k, v in self.dev_rows.items()}
            with autocast(ctx.device, ctx.dtype):
                out = self.loss(model, rows)
            totals[0] += out.total.double()
            totals[1] += self.batch_weight(rows)
        model.train(was_training)
        all_reduce_sum(totals, env)
        return float(totals[0] / totals[1]) if totals[1] > 0 else None

    def evaluate(self, model: nn.Module) -> dict[str, float]:
        result: dict[str, float] = {}
        loss = self.dev_loss(model)
        if loss is not None:
            result["dev_loss"] = loss
        if self.task is not None and self.eval_problems and self.ctx.env.is_main and not self.ctx.cfg.fsdp:
            from tinylm.evaluate.exact_match import exact_match

            cfg: SFTConfig = self.ctx.cfg  # type: ignore[assignment]
            with autocast(self.ctx.device, self.ctx.dtype):
                score = exact_match(model, self.chat, self.task, self.eval_problems, cfg.max_new_tokens)
            result["exact_match"] = score.accuracy
            self.last_samples = score.samples
        return result

    # ---- checkpoints ---------------------------------------------------------------------------
    def tokenizer_file(self) -> Path | None:
        return self.tokenizer_path

    def checkpoint_meta(self) -> dict[str, Any]:
        cfg: SFTConfig = self.ctx.cfg  # type: ignore[assignment]
        meta: dict[str, Any] = {
            "stage": self.name, "data": cfg.data, "base": str(self.base),
            "chat_template": self.chat.jinja_template(),
            "lineage": self.lineage,
        }
        if cfg.lora_rank:
            lora = cfg.lora_config()
            meta["adapter"] = {"lora": lora.to_dict(), "scale": lora.scale, "base": str(self.base),
                               "added_tokens": self.added_tokens, "trained_whole": self._trained_whole(self.model)}
        return meta

    def finish(self, model: nn.Module, checkpoint: Path | None) -> str | None:
        if checkpoint is not None and self.ctx.cfg.lora_rank:  # type: ignore[attr-defined]
            self.ctx.say(f"merged copy (base + adapters, loadable without the base): {save_merged(checkpoint, model)}")
        samples = getattr(self, "last_samples", None)
        if not samples:
            return None
        return "\n".join(f"{'ok ' if ok else 'bad'} {prompt!r} -> {reply!r}" for prompt, reply, ok in samples)

    def run_name(self, cfg: TrainConfig) -> tuple[str, str]:
        """runs/<base run>-sft by default: the base run's folder name, whichever checkpoint of it was given."""
        path = Path(cfg.base).resolve()  # type: ignore[attr-defined]
        run = path.parent.parent if path.parent.name == "checkpoints" else path
        return run.name or "base", self.name


def save_merged(adapter_checkpoint: Path, model: nn.Module) -> Path:
    """RUN/merged/checkpoints/step_N: the adapter checkpoint's model with the adapters folded in, self-contained."""
    from tinylm.checkpoint import adapter_weights, save_checkpoint

    info = read_checkpoint_config(adapter_checkpoint)
    adapter = info.pop("adapter")
    meta = {k: v for k, v in info.items() if k not in ("format", "version", "step", "model")}
    meta["merged_from"] = str(adapter_checkpoint)
    return save_checkpoint(adapter_checkpoint.parent.parent / "merged", int(info["step"]), model,
                           checkpoint_model_config(adapter_checkpoint),
                           state_dict=adapter_weights(adapter_checkpoint, adapter),
                           tokenizer_file=adapter_checkpoint / TOKENIZER, meta=meta)
