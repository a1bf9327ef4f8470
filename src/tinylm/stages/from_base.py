"""What every post-training stage shares: it starts from a checkpoint and ends as a chat model.

SFT, reward modelling, DPO and RL differ in their data and their loss. They all:

- start from `--base`, any tinylm checkpoint or run folder (an imported model, an SFT run, a LoRA
  run, which loads as its base with the adapters folded in);
- speak the chat format: the base's tokenizer gets the chat tokens if it lacks them, and the model
  grows mean-initialised rows for them (`vocab_growth.py`);
- can train LoRA adapters instead of every weight (`lora.py`): the base is frozen, the checkpoints
  hold the adapters alone (plus the embedding when chat tokens were added, which LoRA cannot reach)
  and name their base, and the run's last checkpoint also gets a merged, self-contained copy;
- record their lineage, their data spec and the chat template in every checkpoint.

`FromBaseConfig` holds those options and `FromBaseStage` does those things, so a stage file holds
only what makes that stage (its rows, its loss, its evaluation).
"""

from __future__ import annotations

import hashlib
import json
from pathlib import Path
from typing import Any, TypeVar

import torch
from torch import nn

from tinylm.checkpoint import (
    TOKENIZER,
    adapter_weights,
    checkpoint_model_config,
    load_weights,
    read_checkpoint_config,
    read_weights,
    resolve_checkpoint,
    save_checkpoint,
)
from tinylm.config import ModelConfig
from tinylm.errors import TinyLMError
from tinylm.evaluate.exact_match import exact_match
from tinylm.models.factory import build_model
from tinylm.models.lora import apply_lora, load_lora_state_dict, lora_state_dict
from tinylm.models.vocab_growth import init_token_rows
from tinylm.runtime.compile_policy import eager_blocks
from tinylm.runtime.device import autocast
from tinylm.runtime.rng import seed_everything
from tinylm.stages.post_config import FromBaseConfig
from tinylm.tasks.task import Example, Task
from tinylm.tokenizer import load_tokenizer
from tinylm.tokenizer.chat_format import ChatFormat
from tinylm.tokenizer.chat_tokens import with_chat_tokens
from tinylm.train.stage import Stage, StageContext, lineage

# the stage's own config: SFTConfig, DPOConfig, RLConfig... (every one a FromBaseConfig)
PostConfigT = TypeVar("PostConfigT", bound=FromBaseConfig)


def held_out(item: Any, fraction: float) -> bool:
    """A stable hash of a conversation or pair decides its split: the same one lands in the same split every run."""
    digest = hashlib.blake2b(json.dumps(item, sort_keys=True).encode("utf-8"), digest_size=8).digest()
    return int.from_bytes(digest, "big") < fraction * 2**64


def base_run_name(base: str) -> str:
    """The base run's folder name, whichever checkpoint of it was given."""
    path = Path(base).resolve()
    run = path.parent.parent if path.parent.name == "checkpoints" else path
    return run.name or "base"


class FromBaseStage(Stage[PostConfigT]):
    """A stage that starts from `--base`; subclasses read their data in `setup_data` and give their loss."""

    learns_from = "data"  # the config field naming what it learns from (RL: its task)

    task: Task | None = None  # a built-in task's held-out problems are scored by exact-match
    eval_problems: list[Example] = []  # replaced by a stage's setup, never appended to
    last_samples: list[tuple[str, str, bool]] | None = None  # (prompt, reply, verified) of the last evaluation

    def held_out_exact_match(self, model: nn.Module) -> dict[str, float]:
        """Greedy exact-match on the task's held-out problems, on rank 0 (a sharded model cannot decode alone)."""
        if self.task is None or not self.eval_problems or not self.ctx.env.is_main or self.ctx.cfg.fsdp:
            return {}
        with torch.no_grad(), autocast(self.ctx.device, self.ctx.dtype), eager_blocks():  # no graph per cache length
            score = exact_match(model, self.chat, self.task, self.eval_problems, self.ctx.cfg.max_new_tokens)
        self.last_samples = score.samples
        self.keep_samples([{"prompt": p, "reply": r, "verified": ok} for p, r, ok in score.samples])
        return {"exact_match": score.accuracy}

    def setup(self, ctx: StageContext[PostConfigT]) -> None:
        super().setup(ctx)
        cfg = ctx.cfg
        if not cfg.base:  # the CLI fills a resumed run's base from its checkpoint; "" would resolve to "."
            raise TinyLMError("--base is required: the checkpoint or run folder to start from (`tinylm "
                              f"{self.name} --resume` reads it from the run)")
        self.base = resolve_checkpoint(cfg.base)  # a LoRA checkpoint loads as its base plus adapters
        self._prepare_tokenizer(ctx)
        self.seq_len = cfg.seq_len or self.mcfg.context_length
        if self.seq_len > self.mcfg.context_length:
            raise TinyLMError(f"--seq-len {self.seq_len} exceeds the model's context_length "
                              f"{self.mcfg.context_length}")
        self.report: list[str] = []
        self.setup_data(cfg)
        # read once: keep_last may prune the checkpoint this run resumed from
        self.lineage = lineage(self.name, ctx.resume, self.base, self.data_spec(), ctx.run_dir)

    def data_spec(self) -> str:
        """What this stage learned from, for the lineage and config.json: the `learns_from` option's value."""
        return str(getattr(self.ctx.cfg, self.learns_from))

    def setup_data(self, cfg: PostConfigT) -> None:
        """Read, render and lay out the stage's rows (and add lines for the run header to `self.report`)."""
        raise NotImplementedError

    def _prepare_tokenizer(self, ctx: StageContext[PostConfigT]) -> None:
        """The base's tokenizer with the chat tokens (added if missing) and the model config that fits it."""
        if not (self.base / TOKENIZER).is_file():
            raise TinyLMError(f"base checkpoint {self.base} has no {TOKENIZER}: post-training needs the base's "
                              "tokenizer")
        base_tokenizer = load_tokenizer(self.base / TOKENIZER)
        self.tokenizer, self.added_tokens = with_chat_tokens(base_tokenizer)
        self.known_rows = base_tokenizer.n_vocab  # rows of tokens the base model has seen
        self.chat = ChatFormat.from_tokenizer(self.tokenizer)
        base_cfg = checkpoint_model_config(self.base)
        if ctx.cfg.gradient_checkpointing:
            base_cfg = base_cfg.replace(gradient_checkpointing=True)
        self.base_config = base_cfg
        self.mcfg = base_cfg.replace(vocab_size=max(base_cfg.vocab_size, self.tokenizer.n_vocab))
        self.tokenizer_path = ctx.run_dir / TOKENIZER
        if ctx.env.is_main:
            ctx.run_dir.mkdir(parents=True, exist_ok=True)
            self.tokenizer.save(self.tokenizer_path)
        if self.added_tokens:
            ctx.say(f"added the chat token(s) {', '.join(self.added_tokens)} to {base_tokenizer.name}: their "
                    "embedding rows start at the mean of the known rows")

    def model_config(self) -> ModelConfig:
        return self.mcfg

    def describe(self) -> list[str]:
        cfg = self.ctx.cfg
        lines = [f"base: {self.base}", f"data: {self.data_spec()}", *self.report]
        if cfg.lora_rank:
            lines.append(f"LoRA: rank {cfg.lora_rank}, targets {cfg.lora_targets}: "
                         f"{self.trainable:,} trainable parameters of {self.total:,}")
        return lines

    def run_name(self, cfg: PostConfigT) -> str:
        """runs/<base run>-<stage> by default: the base run's folder name, whichever checkpoint of it was given."""
        return f"{base_run_name(cfg.base)}-{self.name}"

    # ---- the model -----------------------------------------------------------------------------
    def build_model(self) -> nn.Module:
        """The base with room for the chat tokens, LoRA adapters if asked, and a resumed run's weights."""
        cfg = self.ctx.cfg
        seed_everything(cfg.seed)  # the same adapter initialisation on every rank and every resume
        model = build_model(self.base_config)
        load_weights(model, self.base)
        added_ids = [self.tokenizer.token_to_id(t) for t in self.added_tokens]
        init_token_rows(model, [i for i in added_ids if i is not None], self.known_rows)
        model.config = self.mcfg  # gradient checkpointing and the grown vocabulary
        if cfg.lora_rank:
            apply_lora(model, cfg.lora_config())
            for name in self._trained_whole(model):  # the added tokens' rows must learn: LoRA cannot reach them
                model.get_parameter(name).requires_grad_(True)
        if self.ctx.resume is not None:
            self._load_resume(model, self.ctx.resume)
        self.policy = model  # the language model (a stage may wrap it, e.g. PPO's value head)
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
        if not self.ctx.cfg.lora_rank:
            load_weights(model, resume)
            return
        stored = read_weights(resume)
        whole = self._trained_whole(model)
        load_lora_state_dict(model, {k: v for k, v in stored.items() if k not in whole})
        with torch.no_grad():
            for name in whole:
                model.get_parameter(name).copy_(stored[name])

    def checkpoint_weights(self, model: nn.Module, gathered: dict[str, torch.Tensor] | None
                           ) -> dict[str, torch.Tensor] | None:
        if not self.ctx.cfg.lora_rank:
            return gathered
        # adapter-only (the base is named in config.json), plus matrices trained whole
        policy = self.policy
        return {**lora_state_dict(policy), **{n: policy.get_parameter(n).detach() for n in self._trained_whole(policy)}}

    # ---- checkpoints ---------------------------------------------------------------------------
    def tokenizer_file(self) -> Path | None:
        return self.tokenizer_path

    def checkpoint_meta(self) -> dict[str, Any]:
        cfg = self.ctx.cfg
        # the base as a full path: a relative --base (the studio's form writes one) names nothing from another folder
        meta: dict[str, Any] = {"stage": self.name, "data": self.data_spec(), "base": str(self.base.resolve()),
                                "chat_template": self.chat.jinja_template(), "lineage": self.lineage}
        if cfg.lora_rank:
            lora = cfg.lora_config()
            meta["adapter"] = {"lora": lora.to_dict(), "scale": lora.scale, "base": str(self.base),
                               "added_tokens": self.added_tokens, "trained_whole": self._trained_whole(self.policy)}
        return meta

    def finish(self, model: nn.Module, checkpoint: Path | None) -> str | None:
        if checkpoint is not None and self.ctx.cfg.lora_rank:
            self.ctx.say(f"merged copy (base + adapters, loadable without the base): "
                         f"{save_merged(checkpoint, self.policy)}")
        if not self.last_samples:
            return None
        return "\n".join(f"{'ok ' if ok else 'bad'} {prompt!r} -> {reply!r}" for prompt, reply, ok in self.last_samples)


def save_merged(adapter_checkpoint: Path, model: nn.Module) -> Path:
    """RUN/merged/checkpoints/step_N: the adapter checkpoint's model with the adapters folded in, self-contained."""
    info = read_checkpoint_config(adapter_checkpoint)
    adapter = info.pop("adapter")
    meta = {k: v for k, v in info.items() if k not in ("format", "version", "step", "model")}
    meta["merged_from"] = str(adapter_checkpoint)
    return save_checkpoint(adapter_checkpoint.parent.parent / "merged", int(info["step"]), model,
                           checkpoint_model_config(adapter_checkpoint),
                           state_dict=adapter_weights(adapter_checkpoint, adapter),
                           tokenizer_file=adapter_checkpoint / TOKENIZER, meta=meta)
