"""A run's checkpoints: everything exact resume needs, written at a step and read back on `--resume`.

A checkpoint holds the weights, the optimizer state, every rank's RNG state, the stage's data
position, the schedule, the training seconds spent (a time budget counts across resumes) and the run's
choices; the schedule itself is a pure function of the step (and, under a time budget, of those seconds).
Restoring all of it makes the continued run compute, on CPU, bit-identical losses to a run that
never stopped. Under FSDP the sharded weights and optimizer state are gathered whole first.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch
from torch import nn

from tinylm.checkpoint import read_checkpoint_config, save_checkpoint
from tinylm.checkpoint.layout import SNAPSHOTS
from tinylm.config import ModelConfig
from tinylm.errors import TinyLMError
from tinylm.runtime.distributed import DistEnv, all_gather_objects, barrier
from tinylm.runtime.rng import capture_rng, restore_rng
from tinylm.runtime.run_choices import RunChoices
from tinylm.train.batch_plan import BatchPlan, check_quarters
from tinylm.train.config import EngineConfig
from tinylm.train.optim import AnyOptimizer, OptimizerList, members
from tinylm.train.run_clock import RunClock
from tinylm.train.schedule import LRSchedule
from tinylm.train.stage import Stage


@dataclass
class RunCheckpoints:
    """Saves the run at a step, and puts a resumed run's train state back into the optimizer and the stage."""

    cfg: EngineConfig
    env: DistEnv
    stage: Stage
    run_dir: Path
    raw: nn.Module  # the unwrapped model
    model_config: ModelConfig
    optimizer: AnyOptimizer
    scaler: torch.amp.GradScaler | None
    schedule: LRSchedule
    choices: RunChoices
    say: Callable[[str], None]
    plan: BatchPlan  # this invocation's step shapes: its global batch

    def save(self, step: int, tokens: int, metrics: dict[str, Any], clock: RunClock) -> Path | None:
        """Checkpoint `step` with the run's clock (what a time budget needs to go on where it stopped;
        collective under torchrun; rank 0 writes)."""
        cfg, env, stage = self.cfg, self.env, self.stage
        weights = stage.checkpoint_weights(self.raw, self._model_state())
        optimizer = self._optimizer_state()
        rngs = all_gather_objects(capture_rng(), env)
        path = None
        if env.is_main:
            train_state = {"step": step, "tokens": tokens, "optimizer": optimizer, "loader": stage.state_dict(),
                           "rng": rngs, "schedule": self.schedule.to_dict(), **clock.state(),
                           "scaler": self.scaler.state_dict() if self.scaler is not None else None,
                           "world_size": env.world_size, "dtype": str(self.choices.dtype).removeprefix("torch."),
                           "attention": self.choices.attention.value}
            meta = {"tokens": tokens, "train": cfg.to_dict(), "params": self.raw.num_params(), "metrics": metrics,
                    "run_choices": self.choices.record(), **stage.checkpoint_meta()}
            path = save_checkpoint(self.run_dir, step, self.raw, self.model_config, state_dict=weights,
                                   tokenizer_file=stage.tokenizer_file(), train_state=train_state, meta=meta,
                                   keep_last=cfg.keep_last or None)
        barrier(env)
        return path

    def periodic(self, step: int, tokens: int, metrics: dict[str, Any], clock: RunClock, stopped: str | None) -> None:
        """After a step: the checkpoint every --checkpoint-every steps (not at a stop, which saves its own) and the
        weights-only snapshot every --snapshot-every."""
        if self.cfg.checkpoint_every and step % self.cfg.checkpoint_every == 0 and stopped is None:
            self.save(step, tokens, metrics, clock)
        if self.cfg.snapshot_every and step % self.cfg.snapshot_every == 0:
            self.snapshot(step, tokens, {"loss": metrics["loss"]})

    def snapshot(self, step: int, tokens: int, metrics: dict[str, Any]) -> None:
        """The weights alone at `step`, in RUN/snapshots/checkpoints/step_N: a few megabytes where a checkpoint
        carries the optimizer's moments too, so a run can keep dozens (how induction heads form, step by step)."""
        weights = self.stage.checkpoint_weights(self.raw, self._model_state())
        if self.env.is_main:
            save_checkpoint(self.run_dir / SNAPSHOTS, step, self.raw, self.model_config, state_dict=weights,
                            tokenizer_file=self.stage.tokenizer_file(),
                            meta={"tokens": tokens, "metrics": metrics, "snapshot": True,
                                  **self.stage.checkpoint_meta()})
        barrier(self.env)

    def restore(self, state: dict[str, Any], checkpoint: Path) -> tuple[int, int]:
        """Load `checkpoint`'s train state into the optimizer, the loss scaler and the stage; (step, tokens)."""
        optimizer = self.optimizer
        base = [(g["initial_lr"], g["initial_weight_decay"]) for g in optimizer.param_groups]
        if self.cfg.fsdp:
            from torch.distributed.checkpoint.state_dict import StateDictOptions, set_optimizer_state_dict  # heavy

            for member, saved in per_member(state["optimizer"], optimizer, checkpoint):
                set_optimizer_state_dict(self.raw, member, by_name(saved, self.raw, member),
                                         options=StateDictOptions(full_state_dict=True))
        else:
            try:
                optimizer.load_state_dict(state["optimizer"])
            except (ValueError, KeyError) as exc:
                raise TinyLMError(f"checkpoint {checkpoint} has optimizer state for another optimizer "
                                  f"(not --optimizer {self.cfg.optimizer}?): {exc}") from None
        for group, (lr, wd) in zip(optimizer.param_groups, base):  # this invocation's settings win
            group["initial_lr"], group["initial_weight_decay"], group["weight_decay"] = lr, wd, wd
        if self.scaler is not None and state.get("scaler"):
            self.scaler.load_state_dict(state["scaler"])
        self.stage.load_state_dict(state["loader"])
        before = int(state.get("world_size", 1))
        if before != self.env.world_size:
            was = saved_global_batch(read_checkpoint_config(checkpoint).get("train") or {}, self.cfg,
                                     self.model_config.context_length, before)
            self.say(f"note: {world_size_note(before, self.env.world_size, was, self.plan)}")
        saved = {"time_budget": None, **state["schedule"]} if state.get("schedule") else None
        if saved and (changed := schedule_change(saved, self.schedule.to_dict())):
            self.say(f"note: the lr schedule changed on resume: {changed}")
        return int(state["step"]), int(state["tokens"])

    def _optimizer_state(self) -> dict[str, Any]:
        if self.cfg.fsdp:
            from torch.distributed.checkpoint.state_dict import StateDictOptions, get_optimizer_state_dict  # heavy

            options = StateDictOptions(full_state_dict=True, cpu_offload=True)
            whole = [get_optimizer_state_dict(self.raw, member, options=options) for member in members(self.optimizer)]
            # the layout OptimizerList.state_dict() writes (Muon + AdamW), so either kind of run resumes the other
            return {"optimizers": whole} if isinstance(self.optimizer, OptimizerList) else whole[0]
        return self.optimizer.state_dict()

    def _model_state(self) -> dict[str, torch.Tensor] | None:
        """FSDP's shards gathered whole on the CPU; None (the model's own state dict) otherwise."""
        if self.cfg.fsdp:
            from torch.distributed.checkpoint.state_dict import StateDictOptions, get_model_state_dict  # heavy

            return get_model_state_dict(self.raw, options=StateDictOptions(full_state_dict=True, cpu_offload=True))
        return None


def _processes(n: int) -> str:
    return f"{n} process" if n == 1 else f"{n} processes"


def saved_global_batch(saved: dict[str, Any], cfg: EngineConfig, context_length: int, world_size: int) -> int:
    """Tokens per step of the run a checkpoint was written by: its batch x accum x row length x processes (an
    option its config lacks is taken as this run's)."""
    batch, accum = saved.get("batch_size", cfg.batch_size), saved.get("grad_accum", cfg.grad_accum)
    return int(batch * accum * (saved.get("seq_len", cfg.seq_len) or context_length) * world_size)


def world_size_note(before: int, after: int, was: int, plan: BatchPlan) -> str:
    """What a resume on another number of processes trains at: the same global batch (the losses then go on as
    one run's, to float order), or another one, and the option that gives the run's own back. A fixed batch
    x accum per process would otherwise change the global batch silently with the number of processes."""
    moved = f"resuming on {_processes(after)} instead of {before}"
    now = plan.full_tokens
    if now == was:
        return (f"{moved} at the same global batch ({now:,} tokens/step): the data goes on from where it stopped, and "
                "the losses are an uninterrupted run's up to the order of float sums, not bit for bit (dropout "
                "noise differs)")
    return f"{moved}: the global batch is now {now:,} tokens/step (was {was:,}); {_keep_batch(was, plan, after)}"


def _keep_batch(was: int, plan: BatchPlan, processes: int) -> str:
    """The option that gives `was` tokens per step back on `processes`: --batch-size first (the same windows as
    the run's own, docs/pipeline/distributed.md), else --grad-accum (as many tokens, other windows)."""
    accum = plan.per_step // processes
    rows, rest = divmod(was, plan.seq_len * accum * processes)
    if rows and not rest:
        try:
            check_quarters(rows, plan.seq_len, plan.ramp_steps, 0)  # a batch ramp starts at a quarter of it
            return f"pass --batch-size {rows} to keep it"
        except TinyLMError:
            pass
    steps, rest = divmod(was, plan.seq_len * plan.batch_size * processes)
    if steps and not rest:
        return f"pass --grad-accum {steps} to keep it"
    return f"no --batch-size or --grad-accum gives it back on {_processes(processes)}"


# the schedule's fields as the header names them (train/schedule.py's LRSchedule)
_SCHEDULE_FIELDS = {"kind": "schedule", "total": "steps", "warmup": "warmup steps", "min_ratio": "min lr ratio",
                    "decay_fraction": "decay fraction", "time_budget": "time budget (s)"}


def schedule_change(saved: dict[str, Any], now: dict[str, Any]) -> str:
    """`steps: 10 -> 20, warmup steps: 10 -> 20`: each field of the lr schedule a resume changed ("" when none)."""
    def shown(value: Any) -> str:
        return "none" if value is None else f"{value:g}" if isinstance(value, float) else str(value)

    return ", ".join(f"{_SCHEDULE_FIELDS.get(name, name)}: {shown(saved.get(name))} -> {shown(value)}"
                     for name, value in now.items() if saved.get(name) != value)


def per_member(saved: dict[str, Any], optimizer: AnyOptimizer, checkpoint: Path) -> list[tuple[Any, dict[str, Any]]]:
    """(torch optimizer, its saved state) pairs: one for AdamW, Muon's and AdamW's for the pair."""
    inner = members(optimizer)
    states = saved.get("optimizers", [saved]) if isinstance(optimizer, OptimizerList) else [saved]
    if len(states) != len(inner) or (len(inner) == 1 and "optimizers" in saved):
        raise TinyLMError(f"checkpoint {checkpoint} has optimizer state for another optimizer "
                          f"(not {optimizer!r}?)")
    return list(zip(inner, states))


def by_name(saved: dict[str, Any], model: torch.nn.Module, optimizer: Any) -> dict[str, Any]:
    """An optimizer state keyed by parameter name, as FSDP's loader wants it. A run saved without FSDP keys
    it by position (torch's own format): the k-th parameter of the saved groups is the k-th of this
    optimizer's groups, which the same model and options build in the same order."""
    groups = saved.get("param_groups") or []
    if all(isinstance(p, str) for g in groups for p in g.get("params", [])):
        return saved  # written under FSDP: names already
    names = {id(p): n for n, p in model.named_parameters()}
    order = [names[id(p)] for g in optimizer.param_groups for p in g["params"]]
    ids = [i for g in groups for i in g["params"]]
    if len(ids) != len(order):
        raise TinyLMError(f"the checkpoint's optimizer holds {len(ids)} parameters, this model {len(order)}")
    name_of = dict(zip(ids, order))
    return {"state": {name_of[i]: v for i, v in saved.get("state", {}).items()},
            "param_groups": [{**g, "params": [name_of[i] for i in g["params"]]} for g in groups]}


def restore_rank_rng(state: dict[str, Any] | None, rank: int) -> None:
    """Put this rank's random streams back: the last thing before the first step, so setup cannot shift them."""
    if state is None:
        return
    states = state["rng"]
    restore_rng(states[rank] if rank < len(states) else states[0])
