"""Everything a distillation run decides before its first step, in the order that refuses early.

First (`plan_models`, before the engine measures its choices): the teacher's checkpoint (refused
before its weights are read when it cannot be a teacher here), the one tokenizer both models share,
and the student's model (a preset at the teacher's vocabulary size, or --base). Then (`prepare`, with
the run's final dtype): the rows, the teacher's answers for sequence-level distillation, the logit cache
(written on first use, checked on every later one) and the teacher itself, loaded only when no cache
answers for it.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import torch
from torch import nn

from tinylm.checkpoint import TOKENIZER, checkpoint_model_config, read_checkpoint_config, resolve_checkpoint
from tinylm.config import ModelConfig
from tinylm.errors import TinyLMError
from tinylm.runtime.device import autocast
from tinylm.runtime.distributed import barrier
from tinylm.stages.distill.config import DistillConfig
from tinylm.stages.distill.data import DistillData, conversation_rows, is_data_folder, text_rows
from tinylm.stages.distill.divergences import DIVERGENCES
from tinylm.stages.distill.logit_cache import CacheKey, LogitCache, has_cache, read_info, rows_fingerprint, write_cache
from tinylm.stages.distill.sequence_level import teacher_answers, write_answers
from tinylm.stages.distill.teacher import (
    check_same_tokenizer,
    fingerprint,
    load_teacher,
    teacher_checkpoint,
    teacher_summary,
    teacher_tokenizer,
)
from tinylm.tokenizer import load_tokenizer
from tinylm.tokenizer.chat_format import ChatFormat
from tinylm.tokenizer.tokenizer import Tokenizer
from tinylm.train.stage import StageContext, StageStart, lineage

DIVERGENCE_TEXT = {"forward_kl": "forward KL(teacher || student)", "reverse_kl": "reverse KL(student || teacher)",
                   "jsd": "generalized JSD"}
assert set(DIVERGENCE_TEXT) == set(DIVERGENCES)


@dataclass
class ModelPlan:
    """The models' side, known before any data is read."""

    teacher: Path | None
    tokenizer: Tokenizer
    tokenizer_source: str
    base: Path | None
    student_config: ModelConfig
    cache_dir: Path | None
    cache_info: dict[str, Any] | None


@dataclass
class DistillSetup(ModelPlan):
    """The models' side plus the data, the cache, the loaded teacher and what the header says."""

    data: DistillData | None = None
    data_spec: str = ""
    teacher_model: nn.Module | None = None
    cache: LogitCache | None = None
    chat: ChatFormat | None = None
    tokenizer_path: Path | None = None
    stop_ids: tuple[int, ...] = ()
    pad_id: int = 0
    lineage: list[dict[str, Any]] = field(default_factory=list)
    header: list[str] = field(default_factory=list)

    @property
    def teacher_path(self) -> str | None:
        return str(self.teacher) if self.teacher else (self.cache_info or {}).get("teacher_path")


def plan_models(start: StageStart[DistillConfig]) -> ModelPlan:
    cfg = start.cfg
    cfg.check_teacher()
    cache_dir = Path(cfg.logit_cache) if cfg.logit_cache else None
    cache_info = read_info(cache_dir) if cache_dir is not None and has_cache(cache_dir) else None
    teacher = teacher_checkpoint(cfg.teacher) if cfg.teacher else None
    if teacher is not None:
        tokenizer, source = teacher_tokenizer(teacher), f"the teacher {teacher}"
        vocab = checkpoint_model_config(teacher).vocab_size
    elif cache_dir is not None and cache_info is not None:
        tokenizer, source = load_tokenizer(cache_dir / TOKENIZER), f"the logit cache {cache_dir}"
        vocab = int(cache_info["vocab_size"])
    else:
        raise TinyLMError(f"--logit-cache {cache_dir} holds no cache yet: give --teacher to write it")
    base = resolve_checkpoint(cfg.base) if cfg.base else None
    if base is not None:
        check_same_tokenizer(tokenizer, load_tokenizer(base / TOKENIZER), source, f"the student --base {base}")
        student = checkpoint_model_config(base)
        if student.vocab_size != vocab:
            raise TinyLMError(f"--base {base} has {student.vocab_size:,} output rows but the teacher {vocab:,}: the "
                              "divergence needs one vocabulary")
    else:
        student = cfg.student_config(vocab)
    if cfg.gradient_checkpointing:
        student = student.replace(gradient_checkpointing=True)
    return ModelPlan(teacher, tokenizer, source, base, student, cache_dir, cache_info)


def default_data(plan: ModelPlan) -> str:
    """The teacher's pretraining data: the first link of its lineage (or what its cache was written on)."""
    if plan.cache_info is not None and plan.teacher is None:
        return str(plan.cache_info["data"])
    assert plan.teacher is not None
    info = read_checkpoint_config(plan.teacher)
    links = info.get("lineage") or [{"data": info.get("data")}]
    data = links[0].get("data") if isinstance(links[0], dict) else None
    if not data or not is_data_folder(str(data)):
        raise TinyLMError(f"the teacher's pretraining data ({data or 'not recorded'}) is not a data folder here: "
                          "give --data")
    return str(data)


def prepare(ctx: StageContext[DistillConfig], plan: ModelPlan) -> DistillSetup:
    cfg = ctx.cfg
    setup = DistillSetup(**vars(plan))
    seq_len = cfg.seq_len or plan.student_config.context_length
    if seq_len > plan.student_config.context_length:
        raise TinyLMError(f"--seq-len {seq_len} exceeds the student's context_length "
                          f"{plan.student_config.context_length}")
    setup.data_spec = cfg.data or default_data(plan)
    setup.tokenizer_path = ctx.run_dir / TOKENIZER
    if ctx.env.is_main:
        ctx.run_dir.mkdir(parents=True, exist_ok=True)
        plan.tokenizer.save(setup.tokenizer_path)
    if plan.teacher is not None and (plan.cache_info is None or plan.cache_dir is None):
        setup.teacher_model = load_teacher(plan.teacher, ctx.device)
        if seq_len > setup.teacher_model.config.context_length:
            raise TinyLMError(f"rows of {seq_len} tokens exceed the teacher's context_length "
                              f"{setup.teacher_model.config.context_length}: give --seq-len")
        setup.header.append(teacher_summary(plan.teacher, setup.teacher_model))
    setup.data = _data(ctx, setup, seq_len)
    setup.header += setup.data.report
    if plan.cache_dir is not None:
        setup.cache = _cache(ctx, setup, seq_len)
        setup.teacher_model = None  # the cache answers for it from here on
    what = DIVERGENCE_TEXT[cfg.divergence] + (f" beta {cfg.beta:g}" if cfg.divergence == "jsd" else "")
    top = f", on the teacher's top {cfg.top_k}" if cfg.top_k else ""
    setup.header.append(f"loss: (1 - {cfg.ce_weight:g}) x {what} at T={cfg.temperature:g}{top} + {cfg.ce_weight:g} x "
                        f"cross-entropy; on-policy share {cfg.on_policy:g}")
    setup.lineage = lineage("distill", ctx.resume, plan.base, setup.data_spec, ctx.run_dir)
    return setup


def _data(ctx: StageContext[DistillConfig], setup: DistillSetup, seq_len: int) -> DistillData:
    cfg, spec, tokenizer = ctx.cfg, setup.data_spec, setup.tokenizer
    if is_data_folder(spec):
        if cfg.sequence_level:
            raise TinyLMError("--sequence-level needs a task's prompts (e.g. --data builtin:arith), not a text folder")
        check_same_tokenizer(tokenizer, load_tokenizer(Path(spec) / TOKENIZER), setup.tokenizer_source,
                             f"the data {spec}")
        eot = tokenizer.eot_id
        setup.stop_ids, setup.pad_id = (eot,), eot
        # the held-out rows of eval_batches global batches, pretraining's: the same whatever the number of processes
        return text_rows(Path(spec), seq_len, cfg.train_rows, cfg.batch_size * ctx.env.world_size, cfg.eval_batches)
    try:
        setup.chat = chat = ChatFormat.from_tokenizer(tokenizer)
    except TinyLMError:
        raise TinyLMError(f"{spec} is conversations but {setup.tokenizer_source} has no chat tokens: distil "
                          "conversations from a chat model (an SFT run)") from None
    setup.stop_ids, setup.pad_id = tuple(chat.stop_ids), chat.eot_id
    answers = None
    if cfg.sequence_level:
        answers = _teacher_answers(ctx, setup, spec)
    return conversation_rows(spec, chat, seq_len, cfg, answers)


def _teacher_answers(ctx: StageContext[DistillConfig], setup: DistillSetup, spec: str) -> list[list[dict[str, Any]]]:
    cfg = ctx.cfg
    probe = conversation_rows(spec, setup.chat, cfg.seq_len or setup.student_config.context_length, cfg)
    if probe.task is None:
        raise TinyLMError("--sequence-level needs a built-in task's prompts and checker (--data builtin:...)")
    problems = probe.task.examples("train", cfg.train_examples, cfg.seed)
    assert setup.teacher_model is not None and setup.chat is not None
    with torch.no_grad(), autocast(ctx.device, ctx.dtype):
        answers = teacher_answers(setup.teacher_model, setup.chat, probe.task, problems, cfg.max_new_tokens,
                                  cfg.keep_correct)
    if not answers.conversations:
        raise TinyLMError("--keep-correct: the teacher answered none of the training prompts correctly")
    if ctx.env.is_main:
        setup.header.append(f"{answers.describe(cfg.keep_correct)}: {write_answers(ctx.run_dir, answers)}")
    return answers.conversations


def _cache(ctx: StageContext[DistillConfig], setup: DistillSetup, seq_len: int) -> LogitCache:
    cfg, data = ctx.cfg, setup.data
    assert setup.cache_dir is not None and data is not None
    key = CacheKey(fingerprint(setup.teacher) if setup.teacher else None, setup.tokenizer.fingerprint,
                   rows_fingerprint(data.train), rows_fingerprint(data.dev) if data.dev else "", seq_len)
    if setup.cache_info is None:
        if ctx.env.is_main:
            teacher = setup.teacher_model
            assert teacher is not None

            def logits(batch: dict[str, torch.Tensor]) -> torch.Tensor:
                rows = {k: v.to(ctx.device) for k, v in batch.items()}
                with torch.no_grad(), autocast(ctx.device, ctx.dtype):
                    out, _ = teacher(rows["idx"], positions=rows.get("positions"), segments=rows.get("segments"))
                return out

            write_cache(setup.cache_dir, key, cfg.cache_top_k, {"train": data.train, "dev": data.dev}, logits,
                        cfg.batch_size, str(setup.teacher), extra={"data": setup.data_spec,
                                                                   "vocab_size": setup.student_config.vocab_size},
                        tokenizer=setup.tokenizer)
            setup.header.append(f"logit cache: wrote the teacher's top {cfg.cache_top_k} for {len(data.train['idx']):,}"
                                f" + {len(data.dev.get('idx', [])):,} rows to {setup.cache_dir}")
        barrier(ctx.env)
    else:
        setup.header.append(f"logit cache: {setup.cache_dir} (top {setup.cache_info['top_k']}, teacher "
                            f"{setup.cache_info['teacher_path']}), the teacher is not loaded")
    cache = LogitCache(setup.cache_dir, key)
    if cfg.top_k is not None and cfg.top_k > cache.top_k:
        raise TinyLMError(f"--top-k {cfg.top_k} is more than the {cache.top_k} the cache {setup.cache_dir} holds")
    return cache
