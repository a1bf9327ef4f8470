"""How a run starts: the hardware check, the resume point with the options it goes on with, the metrics log.

Kept apart from train/loop.py, whose `_Run` calls these once before the first step.
"""

from __future__ import annotations

import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

import torch

from tinylm.errors import TinyLMError
from tinylm.metrics import MetricsLogger, tensorboard_dir
from tinylm.runtime.device import resolve_dtype
from tinylm.runtime.distributed import DistEnv
from tinylm.train.config import EngineConfig
from tinylm.train.resume_options import resumed_config, steps_problem
from tinylm.train.run_setup import ResumePoint, find_resume_point


def check_hardware(cfg: EngineConfig, env: DistEnv, device: torch.device) -> None:
    """Refuse a dtype this device cannot run, and FSDP where it cannot shard."""
    requested = resolve_dtype(device, cfg.dtype)
    if cfg.fsdp and requested == torch.float16:
        raise TinyLMError("--dtype fp16 needs a sharded loss scaler that --fsdp does not set up; use --dtype bf16")
    if cfg.fsdp and not env.enabled:
        raise TinyLMError("--fsdp shards across processes: launch with torchrun --nproc_per_node=N")


def resume_point(cfg: EngineConfig, run_dir: Path, env: DistEnv, device: torch.device,
                 say: Callable[[str], None]) -> tuple[EngineConfig, ResumePoint]:
    """The config the run goes on with and the checkpoint it continues, found once: a resumed run takes its own
    options for every one not given (train/resume_options.py; the line naming them goes to rank 0's stderr), and
    a resume with nothing to continue must be able to start afresh (`start_problem`), before anything is written."""
    notes: list[str] = []  # said once the run can start
    point = find_resume_point(cfg.resume, run_dir, notes.append)
    if point.state is not None and (problem := steps_problem(cfg, int(point.state["step"]))):
        raise TinyLMError(problem)
    if point.checkpoint is not None:
        cfg, line = resumed_config(cfg, point.checkpoint, run_dir)
        if line and env.is_main:
            print(line, file=sys.stderr)
        check_hardware(cfg, env, device)
    if cfg.resume is not None and (problem := cfg.start_problem()):
        raise TinyLMError(problem)
    for line in notes:
        say(line)
    return cfg, point


def open_logger(run_dir: Path, cfg: EngineConfig, env: DistEnv, state: dict[str, Any] | None,
                say: Callable[[str], None], run_config: dict[str, Any]) -> MetricsLogger:
    """metrics.jsonl and the trackers asked for; TensorBoard hides the steps a resume redoes, as metrics.jsonl
    drops them (it goes on from the step after the checkpoint)."""
    first_step = 0 if state is None else int(state["step"]) + 1
    logger = MetricsLogger(run_dir, active=env.is_main, tensorboard=tensorboard_dir(cfg.tensorboard, run_dir),
                           wandb=cfg.wandb, run_config=run_config, first_step=first_step)
    for line in logger.notes:
        say(line)
    return logger
