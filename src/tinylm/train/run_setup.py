"""The steps of a run's setup that the loop reads as one line each: folder, lock, resume, log, model, optimizer.

In the order `train/loop.py` takes them: rank 0 chooses the run folder and locks it (sweeping a
crash's leftovers), `--resume` names the checkpoint to continue or to start from, the metrics log
is cut back to the checkpoint, and the model is built, wrapped for DDP/FSDP and given its chosen
attention kernel and compile plan, then its optimizer, loss scaler and schedule.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch
from torch import nn

from tinylm.checkpoint import has_train_state, load_train_state, sweep_leftovers
from tinylm.config import ModelConfig
from tinylm.errors import TinyLMError
from tinylm.metrics import METRICS, SAMPLES, truncate_after
from tinylm.runtime.attention_policy import use_attention_kernel
from tinylm.runtime.compile_policy import compile_blocks
from tinylm.runtime.distributed import DistEnv, all_gather_objects, barrier
from tinylm.runtime.run_choices import RunChoices
from tinylm.train.batch_plan import BatchPlan
from tinylm.train.config import EngineConfig
from tinylm.train.distributed import wrap_model
from tinylm.train.optim import AnyOptimizer, build_optimizer
from tinylm.train.run_dir import choose_run_dir, plan_resume
from tinylm.train.run_lock import RunLock
from tinylm.train.schedule import LRSchedule
from tinylm.train.stage import Stage


def open_run_dir(cfg: EngineConfig, env: DistEnv, stage: Stage) -> Path:
    """The run folder, chosen on rank 0 (`--out`, or runs/<name>-<kind> numbered past existing ones)."""
    chosen = choose_run_dir(cfg.out, stage.run_name(cfg), cfg.resume) if env.is_main else None
    return Path(all_gather_objects(str(chosen), env)[0])


def acquire_run_lock(lock: RunLock | None, run_dir: Path, env: DistEnv, say: Callable[[str], None]) -> None:
    """Rank 0 (the one given a `lock`) takes RUN/.lock for the whole run and sweeps crash leftovers; a refusal
    stops every rank. The caller releases the lock when the run ends."""
    refusal = None
    if lock is not None:
        try:
            note = lock.acquire()
        except TinyLMError as exc:
            refusal = str(exc)
        else:
            for line in ([note] if note else []) + sweep_leftovers(run_dir):
                say(line)
    refusal = all_gather_objects(refusal, env)[0]
    if refusal is not None:
        raise TinyLMError(refusal)


@dataclass(frozen=True)
class ResumePoint:
    """Where `--resume` starts the run: the checkpoint found, and what kind of start it makes."""

    checkpoint: Path | None = None
    state: dict[str, Any] | None = None  # its train state, when the run continues it
    resume: Path | None = None  # continued: weights, optimizer, RNG, data position, step
    start_from: Path | None = None  # weights only (e.g. `tinylm import`): a fresh run from them


def find_resume_point(resume: str | None, run_dir: Path, say: Callable[[str], None]) -> ResumePoint:
    plan = plan_resume(resume, run_dir)
    for line in plan.notes:
        say(line)
    found = plan.checkpoint
    if found is not None and not has_train_state(found):
        return ResumePoint(found, start_from=found)
    if found is not None:
        return ResumePoint(found, load_train_state(found), resume=found)
    if resume is not None:
        say(f"no checkpoint in {run_dir} yet: starting a fresh run")
    return ResumePoint()


def planned_steps(cfg: EngineConfig, plan: BatchPlan) -> int:
    """Optimizer steps the run plans in all: --max-steps, or fewer when --max-tokens comes first (a batch ramp's
    short steps counted)."""
    if cfg.max_tokens is None:
        return cfg.max_steps
    return min(cfg.max_steps, plan.steps_for(cfg.max_tokens))


def schedule_steps(cfg: EngineConfig, plan: BatchPlan) -> int:
    """The lr schedule's length: --schedule-steps, else the planned steps (at least one under --max-tokens)."""
    if cfg.schedule_steps:
        return cfg.schedule_steps
    if cfg.max_tokens is None:
        return cfg.max_steps
    return max(1, planned_steps(cfg, plan))


def reset_metrics_log(run_dir: Path, env: DistEnv, state: dict[str, Any] | None) -> None:
    """A fresh run starts a fresh metrics.jsonl; a resumed one drops the rows past its checkpoint (redone)."""
    if env.is_main:
        run_dir.mkdir(parents=True, exist_ok=True)
        if state is None:
            (run_dir / METRICS).unlink(missing_ok=True)
            (run_dir / SAMPLES).unlink(missing_ok=True)
        else:
            truncate_after(run_dir, int(state["step"]))
    barrier(env)


def build_training_model(stage: Stage, cfg: EngineConfig, env: DistEnv, device: torch.device,
                         model_config: ModelConfig, choices: RunChoices) -> tuple[nn.Module, nn.Module]:
    """(the model, what the loop calls forward on): sharded in place under FSDP, wrapped in DDP under torchrun."""
    raw = stage.build_model()
    raw.to(device)
    if env.enabled:
        torch.manual_seed(cfg.seed + 7919 * env.rank)  # but independent dropout noise per rank
    train_model: nn.Module = raw
    if cfg.fsdp:
        wrap_model(raw, env, device, fsdp=True)  # shards in place
    use_attention_kernel(raw, choices.attention.value)
    if choices.compile.value:  # in place: the state-dict names stay, DDP wraps the same module
        compile_blocks(raw, dynamic=False if stage.follows_batch_plan else None)  # the plan's few shapes, each static
    if env.enabled and not cfg.fsdp:
        train_model = wrap_model(train_model, env, device, find_unused=model_config.is_moe)
    return raw, train_model


def build_optimization(raw: nn.Module, cfg: EngineConfig, device: torch.device, dtype: torch.dtype,
                       plan: BatchPlan) -> tuple[AnyOptimizer, torch.amp.GradScaler | None, LRSchedule]:
    """The optimizer, a loss scaler for fp16, and the learning-rate schedule over --schedule-steps (and the
    --time-budget, whichever ends first)."""
    optimizer = build_optimizer(raw, cfg.optimizer, lr=cfg.adamw_lr, weight_decay=cfg.weight_decay,
                                betas=(cfg.beta1, cfg.beta2), muon_lr=cfg.muon_lr, muon_momentum=cfg.muon_momentum,
                                device=device)
    scaler = torch.amp.GradScaler("cuda") if dtype == torch.float16 else None
    total = schedule_steps(cfg, plan)
    schedule = LRSchedule(cfg.schedule, total, min(cfg.warmup_steps, total), cfg.min_lr_ratio, cfg.decay_fraction,
                          time_budget=cfg.time_budget)
    return optimizer, scaler, schedule
