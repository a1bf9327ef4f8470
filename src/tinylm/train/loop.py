"""The one training loop: `run_training(TrainConfig, stage=...) -> TrainSummary`, for every stage.

Pretraining (`stages/pretrain/stage.py`), SFT (`stages/sft/stage.py`) and the later stages plug in as a `Stage`
(`train/stage.py`): their model, batches, loss and evaluation. Everything else is here, once.

One step is: set the learning rate from the schedule, accumulate gradients over micro-batches, clip,
check the loss is finite, take the optimizer step. Around it: evaluation every `eval_every` steps,
checkpoints every `checkpoint_every`, a log row every `log_every`, and the stop rules (max steps,
max tokens, time budget, Ctrl-C, NaN), all decided identically on every rank because the decision
travels with the loss all-reduce.

Exact resume: a checkpoint holds the weights, the optimizer state, every RNG state (per rank) and the
stage's data position; the schedule is a pure function of the step. Restoring all of it makes the
continued run compute, on CPU, bit-identical losses to a run that never stopped.
"""

from __future__ import annotations

import contextlib
import math
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

import torch
import torch.distributed as dist
from torch import nn

from tinylm.checkpoint import (
    check_same_model,
    checkpoint_model_config,
    has_train_state,
    list_checkpoints,
    load_train_state,
    newest_resumable,
    save_checkpoint,
    sweep_leftovers,
)
from tinylm.errors import TinyLMError, is_oom
from tinylm.metrics import METRICS, MetricsLogger, truncate_after
from tinylm.runtime.attention_policy import AttentionChoice, choose_attention, use_attention_kernel
from tinylm.runtime.compile_policy import compile_blocks, eager_blocks, plan_compile
from tinylm.runtime.device import configure_backends, describe, empty_cache, peak_flops, resolve_dtype
from tinylm.runtime.distributed import DistEnv, all_gather_objects, all_reduce_sum, barrier, cleanup, init_distributed
from tinylm.runtime.precision import PrecisionChoice, choose_precision
from tinylm.runtime.rng import capture_rng, restore_rng
from tinylm.train.config import TrainConfig
from tinylm.train.distributed import wrap_model
from tinylm.train.faults import StopSignal, oom_message
from tinylm.train.mfu import model_flops_utilization
from tinylm.train.optim import AnyOptimizer, build_optimizer, members
from tinylm.train.progress import Progress
from tinylm.train.run_dir import choose_run_dir, plan_resume
from tinylm.train.run_lock import RunLock
from tinylm.train.schedule import LRSchedule, apply_lr
from tinylm.train.stage import Stage, StageContext
from tinylm.train.step import accumulate_gradients, clip_gradients


@dataclass
class TrainSummary:
    """What a run achieved; `tinylm compare` tabulates these."""

    run_dir: str
    checkpoint: str | None
    arch: str
    steps: int
    tokens: int
    final_loss: float | None
    dev_loss: float | None
    dev_bpb: float | None
    tokens_per_s: float
    mfu: float | None
    params: int
    non_embedding_params: int
    stopped: str  # max_steps | max_tokens | time_budget | interrupted | nan
    wall_s: float
    sample: str | None = None
    stage: str = "pretrain"
    evaluation: dict[str, float] = field(default_factory=dict)  # the stage's last evaluation

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


def run_training(config: TrainConfig | None, *, stage: Stage, **changes: Any) -> TrainSummary:
    """Train as `config` says (fields can be changed by keyword) with `stage` (pretraining, SFT, DPO, RL...).

    Under torchrun every rank calls this; a process group started by the caller is left running.
    """
    cfg = config or TrainConfig()
    if changes:
        cfg = cfg.replace(**changes)
    owns_group = not (dist.is_available() and dist.is_initialized())
    env, device = init_distributed(cfg.device)
    threads = torch.get_num_threads()
    graceful = False
    try:
        summary = _Run(cfg, env, device, stage).train()
        graceful = True
        return summary
    finally:
        torch.set_num_threads(threads)  # --threads is for this run, not for the caller's process
        if owns_group:
            cleanup(env, graceful)


class _Run:
    """One training run's state; `train()` is the loop, the other methods are its parts."""

    def __init__(self, cfg: TrainConfig, env: DistEnv, device: torch.device, stage: Stage):
        self.cfg, self.env, self.device, self.stage = cfg, env, device, stage
        self.t_start = time.perf_counter()
        if cfg.threads:
            torch.set_num_threads(cfg.threads)
        configure_backends(device)
        self.dtype = resolve_dtype(device, cfg.dtype)
        if cfg.fsdp and cfg.optimizer == "muon":
            raise TinyLMError("Muon needs whole matrices and --fsdp shards them; use --optimizer adamw with --fsdp")
        if cfg.fsdp and self.dtype == torch.float16:
            raise TinyLMError("--dtype fp16 needs a sharded loss scaler that --fsdp does not set up; use --dtype bf16")
        if cfg.fsdp and not env.enabled:
            raise TinyLMError("--fsdp shards across processes: launch with torchrun --nproc_per_node=N")
        self.progress = Progress(cfg.max_steps, enabled=False)  # replaced once the start step is known
        self.lock: RunLock | None = None

    # ---- messages --------------------------------------------------------------------------------
    def say(self, line: str) -> None:
        if self.env.is_main:
            self.progress.write(line)

    # ---- setup -----------------------------------------------------------------------------------
    def _setup(self) -> None:
        cfg, env = self.cfg, self.env
        chosen = choose_run_dir(cfg.out, *self.stage.run_name(cfg), cfg.resume) if env.is_main else None
        self.run_dir = Path(all_gather_objects(str(chosen), env)[0])
        self._lock_run_dir()
        plan = plan_resume(cfg.resume, self.run_dir)
        for line in plan.notes:
            self.say(line)
        self.ckpt = plan.checkpoint
        self.state: dict[str, Any] | None = None
        resume = start_from = None
        if self.ckpt is not None and not has_train_state(self.ckpt):
            start_from = self.ckpt  # weights only: a fresh run that starts from them
        elif self.ckpt is not None:
            resume = self.ckpt
            self.state = load_train_state(self.ckpt)
        elif cfg.resume is not None:
            self.say(f"no checkpoint in {self.run_dir} yet: starting a fresh run")
        stage = self.stage
        stage.setup(StageContext(cfg=cfg, env=env, device=self.device, dtype=self.dtype, run_dir=self.run_dir,
                                 resume=resume, start_from=start_from, say=self.say))
        self.mcfg = stage.model_config()
        if resume is not None:
            check_same_model(checkpoint_model_config(resume), self.mcfg, resume)
        self.seq_len = cfg.seq_len or self.mcfg.context_length
        self.tokens_per_step = cfg.batch_size * cfg.grad_accum * self.seq_len * env.world_size
        self._choose_precision()
        if env.is_main:
            self.run_dir.mkdir(parents=True, exist_ok=True)
            if self.state is None:
                (self.run_dir / METRICS).unlink(missing_ok=True)  # a fresh run starts a fresh log
            else:
                truncate_after(self.run_dir, int(self.state["step"]))  # steps past the checkpoint are redone
        barrier(env)

        raw = stage.build_model()
        raw.to(self.device)
        if env.enabled:
            torch.manual_seed(cfg.seed + 7919 * env.rank)  # but independent dropout noise per rank
        self.raw = raw
        train_model: nn.Module = raw
        if cfg.fsdp:
            wrap_model(raw, env, self.device, fsdp=True)  # shards in place
        self._choose_attention(raw)
        self._choose_compile(raw)
        if env.enabled and not cfg.fsdp:
            train_model = wrap_model(train_model, env, self.device, find_unused=self.mcfg.is_moe)
        self.train_model = train_model

        self.optimizer: AnyOptimizer = build_optimizer(
            raw, cfg.optimizer, lr=cfg.lr, weight_decay=cfg.weight_decay, betas=(cfg.beta1, cfg.beta2),
            muon_lr=cfg.muon_lr, muon_momentum=cfg.muon_momentum, device=self.device)
        self.scaler = torch.amp.GradScaler("cuda") if self.dtype == torch.float16 else None
        total = cfg.schedule_steps or self._default_schedule_steps()
        self.schedule = LRSchedule(cfg.schedule, total, min(cfg.warmup_steps, total), cfg.min_lr_ratio,
                                   cfg.decay_fraction)
        self.step, self.tokens = 0, 0
        if self.state is not None:
            self._restore(self.state)
        self.peak = peak_flops(self.device, self.dtype)
        self.flops_per_token = raw.flops_per_token(self.seq_len)

    def _choose_precision(self) -> None:
        """The autocast dtype: measured on a CPU with native bf16 (runtime/precision.py); a resume keeps its own."""
        saved = (self.state or {}).get("dtype")
        if self.cfg.dtype == "auto" and saved:
            self.precision = PrecisionChoice(getattr(torch, saved), f"{saved}: as the run being resumed")
        else:
            self.precision = choose_precision(self.device, self.cfg.dtype, self.mcfg, self.cfg.batch_size,
                                              self.seq_len)
        self.dtype = self.stage.ctx.dtype = self.precision.dtype

    def _choose_attention(self, raw: nn.Module) -> None:
        """The attention kernel: measured on a CPU (`attention_policy.py`); a resumed run keeps its own."""
        saved = (self.state or {}).get("attention")
        if self.cfg.attention == "auto" and saved:
            self.attention = AttentionChoice(saved, f"{saved}: as the run being resumed")
        else:
            self.attention = choose_attention(self.cfg.attention, self.mcfg, self.cfg.batch_size, self.seq_len,
                                              self.dtype, self.device)
        use_attention_kernel(raw, self.attention.kernel)

    def _choose_compile(self, raw: nn.Module) -> None:
        """Compile each block in place when asked, or (auto) when the measured compile time pays back."""
        cfg = self.cfg
        done = int(self.state["step"]) if self.state is not None else 0
        total_steps = cfg.max_steps if cfg.max_tokens is None else min(
            cfg.max_steps, math.ceil(cfg.max_tokens / self.tokens_per_step))
        self.compile_choice = plan_compile(cfg.compile, max(0, total_steps - done) * cfg.grad_accum, None,
                                           model_config=self.mcfg, batch_size=cfg.batch_size, seq_len=self.seq_len,
                                           dtype=self.dtype, device=self.device, time_budget_s=cfg.time_budget,
                                           attention=self.attention.kernel)
        if self.compile_choice.enabled:
            compile_blocks(raw)  # in place: the state-dict names stay, DDP wraps the same module

    def _lock_run_dir(self) -> None:
        """Rank 0 holds RUN/.lock for the whole run and sweeps crash leftovers; a refusal stops every rank."""
        refusal = None
        if self.env.is_main:
            self.lock = RunLock(self.run_dir)
            try:
                note = self.lock.acquire()
            except TinyLMError as exc:
                refusal = str(exc)
            else:
                for line in ([note] if note else []) + sweep_leftovers(self.run_dir):
                    self.say(line)
        refusal = all_gather_objects(refusal, self.env)[0]
        if refusal is not None:
            raise TinyLMError(refusal)

    def _default_schedule_steps(self) -> int:
        if self.cfg.max_tokens is None:
            return self.cfg.max_steps
        return max(1, min(self.cfg.max_steps, math.ceil(self.cfg.max_tokens / self.tokens_per_step)))

    # ---- checkpoint state ------------------------------------------------------------------------
    def _optimizer_state(self) -> dict[str, Any]:
        if self.cfg.fsdp:
            from torch.distributed.checkpoint.state_dict import StateDictOptions, get_optimizer_state_dict

            options = StateDictOptions(full_state_dict=True, cpu_offload=True)
            return get_optimizer_state_dict(self.raw, self.optimizer, options=options)  # type: ignore[arg-type]
        return self.optimizer.state_dict()

    def _model_state(self) -> dict[str, torch.Tensor] | None:
        if self.cfg.fsdp:
            from torch.distributed.checkpoint.state_dict import StateDictOptions, get_model_state_dict

            return get_model_state_dict(self.raw, options=StateDictOptions(full_state_dict=True, cpu_offload=True))
        return None

    def _restore(self, state: dict[str, Any]) -> None:
        base = [(g["initial_lr"], g["weight_decay"]) for g in self.optimizer.param_groups]
        if self.cfg.fsdp:
            from torch.distributed.checkpoint.state_dict import StateDictOptions, set_optimizer_state_dict

            set_optimizer_state_dict(self.raw, self.optimizer, state["optimizer"],  # type: ignore[arg-type]
                                     options=StateDictOptions(full_state_dict=True))
        else:
            try:
                self.optimizer.load_state_dict(state["optimizer"])
            except (ValueError, KeyError) as exc:
                raise TinyLMError(f"checkpoint {self.ckpt} has optimizer state for another optimizer "
                                  f"(not --optimizer {self.cfg.optimizer}?): {exc}") from None
        for group, (lr, wd) in zip(self.optimizer.param_groups, base):  # this invocation's settings win
            group["initial_lr"], group["weight_decay"] = lr, wd
        if self.scaler is not None and state.get("scaler"):
            self.scaler.load_state_dict(state["scaler"])
        self.stage.load_state_dict(state["loader"])
        if state.get("world_size", 1) != self.env.world_size:
            self.say(f"note: checkpoint written by {state.get('world_size')} processes, resumed by "
                     f"{self.env.world_size}: same data if the global batch is the same; dropout noise differs")
        self.step, self.tokens = int(state["step"]), int(state["tokens"])
        if state.get("schedule") and state["schedule"] != self.schedule.to_dict():
            self.say(f"note: the schedule changed on resume: {state['schedule']} -> {self.schedule.to_dict()}")

    def _restore_rng(self) -> None:
        """Last thing before the first step, so nothing in setup can shift the random streams."""
        if self.state is None:
            return
        states = self.state["rng"]
        restore_rng(states[self.env.rank] if self.env.rank < len(states) else states[0])

    def save(self, metrics: dict[str, Any]) -> Path | None:
        """Checkpoint the current step (collective under torchrun; only rank 0 writes)."""
        weights = self.stage.checkpoint_weights(self.raw, self._model_state())
        optimizer = self._optimizer_state()
        rngs = all_gather_objects(capture_rng(), self.env)
        path = None
        if self.env.is_main:
            train_state = {"step": self.step, "tokens": self.tokens, "optimizer": optimizer,
                           "loader": self.stage.state_dict(), "rng": rngs, "schedule": self.schedule.to_dict(),
                           "scaler": self.scaler.state_dict() if self.scaler is not None else None,
                           "world_size": self.env.world_size, "dtype": str(self.dtype).removeprefix("torch."),
                           "attention": self.attention.kernel}
            meta = {"tokens": self.tokens, "train": self.cfg.to_dict(), "params": self.raw.num_params(),
                    "metrics": metrics, **self.stage.checkpoint_meta()}
            path = save_checkpoint(self.run_dir, self.step, self.raw, self.mcfg, state_dict=weights,
                                   tokenizer_file=self.stage.tokenizer_file(), train_state=train_state, meta=meta,
                                   keep_last=self.cfg.keep_last or None)
        barrier(self.env)
        return path

    # ---- the loop ----------------------------------------------------------------------------------
    def train(self) -> TrainSummary:
        try:
            return self._train()
        finally:
            if self.lock is not None:
                self.lock.release()

    def _train(self) -> TrainSummary:
        cfg, env = self.cfg, self.env
        self._setup()
        self._announce()
        logger = MetricsLogger(self.run_dir, active=env.is_main, tensorboard=cfg.tensorboard, wandb=cfg.wandb,
                               run_config={"model": self.mcfg.to_dict(), "train": cfg.to_dict(),
                                           "stage": self.stage.name})
        total = cfg.max_steps
        if cfg.max_tokens is not None:
            total = min(total, math.ceil(cfg.max_tokens / self.tokens_per_step))
        self.progress = Progress(total, initial=self.step, enabled=cfg.progress and env.is_main)
        try:
            with StopSignal() as stop:
                summary = self._loop(stop, logger)
        except Exception as exc:
            if is_oom(exc):
                empty_cache(self.device)
                raise TinyLMError(oom_message(cfg.batch_size, cfg.grad_accum, self.seq_len, cfg.dtype,
                                              self.mcfg.gradient_checkpointing, cfg.fsdp, env.world_size,
                                              self.device.type)) from None
            raise
        finally:
            self.progress.close()
            logger.close()
        return summary

    def _announce(self) -> None:
        m = self.mcfg
        self.say(f"run folder: {self.run_dir}")
        for line in self.stage.describe():
            self.say(line)
        self.say(f"model: {self.cfg.preset if self.stage.name == 'pretrain' else self.stage.name} {m.arch}, "
                 f"{self.raw.num_params():,} parameters "
                 f"({self.raw.num_params(non_embedding=True):,} non-embedding), context {m.context_length}")
        self.say(f"device: {describe(self.device)} x {self.env.world_size}, dtype {str(self.dtype)[6:]}, "
                 f"{self.tokens_per_step:,} tokens/step (batch {self.cfg.batch_size} x accum {self.cfg.grad_accum} "
                 f"x seq {self.seq_len} x {self.env.world_size} proc)")
        self.say(f"precision: {self.precision.reason}")
        self.say(f"attention: {self.attention.reason}")
        self.say(f"compile: {self.compile_choice.reason}")
        if self.ckpt is not None and self.state is not None:
            self.say(f"resumed from {self.ckpt} at step {self.step}")

    def _budget_reached(self) -> str | None:
        if self.step >= self.cfg.max_steps:
            return "max_steps"
        if self.cfg.max_tokens is not None and self.tokens >= self.cfg.max_tokens:
            return "max_tokens"
        return None

    def _step_weight(self, batches: list[Any]) -> float:
        """Units (target tokens, pairs...) of the whole step: all micro-batches, all ranks."""
        weights = [self.stage.batch_weight(b) for b in batches]
        if self.stage.constant_weight or not self.env.enabled:
            return float(sum(weights) * (self.env.world_size if self.stage.constant_weight else 1))
        return float(all_reduce_sum(torch.tensor(float(sum(weights)), device=self.device), self.env))

    def _loop(self, stop: StopSignal, logger: MetricsLogger) -> TrainSummary:
        cfg, env, stage = self.cfg, self.env, self.stage
        params = [p for p in self.raw.parameters() if p.requires_grad]
        start_step = self.step
        last_loss: float | None = None
        evaluation: dict[str, float] = {}
        evaluated_at = -1
        window_tokens, window_time, total_train_time, total_tokens = 0.0, 0.0, 0.0, 0.0
        tokens_per_s, mfu = 0.0, None
        last_step_time = 0.0
        stopped = self._budget_reached()
        if stage.evaluate_at_start and self.state is None:
            evaluation = self._evaluate(logger)  # step 0: where the run starts from
        self._restore_rng()
        loop_start = time.perf_counter()
        while stopped is None:
            t0 = time.perf_counter()
            apply_lr(self.optimizer, self.schedule.factor(self.step))
            batches = [stage.next_batch() for _ in range(cfg.grad_accum)]
            stage.begin_step(self.raw, batches)  # a statistic of the whole step, if the stage has one (KTO)
            weight = self._step_weight(batches)
            if weight <= 0:
                raise TinyLMError(f"step {self.step + 1} has nothing to learn from (every target is masked): "
                                  "check the data")
            loss_sum, metric_sums = accumulate_gradients(self.train_model, batches, stage.loss, weight,
                                                         env.world_size, self.device, self.dtype, raw=self.raw,
                                                         scaler=self.scaler)
            if self.scaler is not None:
                for member in members(self.optimizer):
                    self.scaler.unscale_(member)
            grad_norm = clip_gradients(params, cfg.grad_clip)
            # stop when the next step would end past the budget (the last full step predicts its length)
            over_time = (cfg.time_budget is not None and env.is_main
                         and time.perf_counter() - loop_start + last_step_time > cfg.time_budget)
            names = sorted(metric_sums)
            ws = float(env.world_size)
            forwarded = self._forwarded_tokens(batches)
            flags = torch.stack([loss_sum / weight, *(metric_sums[k] / weight for k in names),
                                 torch.tensor(float(forwarded), device=self.device),
                                 grad_norm.float().to(self.device) / ws,
                                 torch.tensor(float(stop.requested is not None) / ws, device=self.device),
                                 torch.tensor(float(over_time) / ws, device=self.device)])
            reduced = all_reduce_sum(flags, env).tolist()
            loss_value, *metric_values, step_tokens, norm_value, interrupted, out_of_time = reduced
            if not math.isfinite(loss_value) or (self.scaler is None and not math.isfinite(norm_value)):
                self.optimizer.zero_grad(set_to_none=True)
                stopped = "nan"
                self._report_nan(loss_value, norm_value)
                break
            if self.scaler is not None:
                for member in members(self.optimizer):
                    self.scaler.step(member)
                self.scaler.update()
            else:
                self.optimizer.step()
            self.optimizer.zero_grad(set_to_none=True)
            self.step += 1
            self.tokens += self.tokens_per_step
            last_loss = loss_value
            step_time = last_step_time = time.perf_counter() - t0
            window_tokens += step_tokens
            window_time += step_time
            total_train_time += step_time
            total_tokens += step_tokens
            lr = self.optimizer.param_groups[0]["lr"]
            stopped = ("interrupted" if interrupted > 0 else "time_budget" if out_of_time > 0
                       else self._budget_reached())
            if self.step % cfg.log_every == 0 or stopped is not None or self.step == start_step + 1:
                tokens_per_s = window_tokens / max(window_time, 1e-9)
                mfu = model_flops_utilization(self.flops_per_token, tokens_per_s, self.peak, env.world_size)
                logger.log({"step": self.step, "loss": loss_value, "lr": lr, "tokens": self.tokens,
                            "tokens_per_s": tokens_per_s, "mfu": mfu, "grad_norm": norm_value,
                            **dict(zip(names, metric_values)), "elapsed_s": time.perf_counter() - loop_start})
                window_tokens, window_time = 0.0, 0.0
            self.progress.update(self.step, loss_value, lr, tokens_per_s, mfu)
            if cfg.eval_every and self.step % cfg.eval_every == 0:
                evaluation = self._evaluate(logger) or evaluation
                evaluated_at = self.step
            if cfg.checkpoint_every and self.step % cfg.checkpoint_every == 0 and stopped is None:
                self.save({"loss": loss_value, **evaluation})
        self.progress.close()
        return self._finish(stopped, start_step, last_loss, evaluation, evaluated_at, logger,
                            tokens_per_s=total_tokens / total_train_time if total_train_time > 0 else 0.0, mfu=mfu)

    def _evaluate(self, logger: MetricsLogger | None) -> dict[str, float]:
        """The stage's evaluation, logged as one row (nothing when the stage has nothing to evaluate)."""
        result = self.stage.evaluate(self.raw)
        if result and logger is not None:
            logger.log({"step": self.step, **result, "tokens": self.tokens})
        return result

    def _forwarded_tokens(self, batches: list[Any]) -> int:
        """This rank's tokens through the forward this step: what tokens/s and MFU count. A stage whose rows
        are cut shorter than seq_len (rollouts, pairs) says how many; the planned batch x seq_len otherwise."""
        planned = self.cfg.batch_size * self.seq_len
        counted = (self.stage.batch_tokens(b) for b in batches)
        return sum(planned if n is None else n for n in counted)

    def _report_nan(self, loss: float, norm: float) -> None:
        good = list_checkpoints(self.run_dir)
        kept = f"the last good checkpoint is {good[-1]}" if good else "no checkpoint was saved yet"
        what = f"loss is {loss}" if not math.isfinite(loss) else f"gradient norm is {norm}"
        self.say(f"tinylm: {what} at step {self.step + 1}; stopping without saving the broken weights; {kept}. "
                 "Try a lower --lr, more --warmup-steps or --grad-clip 1.0.")

    def _finish(self, stopped: str, start_step: int, last_loss: float | None, evaluation: dict[str, float],
                evaluated_at: int, logger: MetricsLogger, tokens_per_s: float, mfu: float | None) -> TrainSummary:
        cfg, env = self.cfg, self.env
        checkpoint: Path | None = None
        sample = None
        if stopped != "nan":
            if evaluated_at != self.step:
                # a resume with nothing left to do logged this step already
                evaluation = self._evaluate(logger if self.step > start_step else None) or evaluation
            existing = list_checkpoints(self.run_dir) if env.is_main else []
            must_save = all_gather_objects(self.step > start_step or not existing, env)[0]  # rank 0 decides
            if must_save:
                checkpoint = self.save({"loss": last_loss, **evaluation})
            elif existing:
                checkpoint = newest_resumable(self.run_dir)[0] or existing[-1]
            if env.is_main:
                self._plot()
                with eager_blocks():  # decoding must not compile a graph per cache length
                    sample = self.stage.finish(self.raw, checkpoint)
        else:
            found = list_checkpoints(self.run_dir) if env.is_main else []
            checkpoint = found[-1] if found else None
        reason = {"max_steps": f"reached --max-steps {cfg.max_steps}",
                  "max_tokens": f"reached --max-tokens {cfg.max_tokens}",
                  "time_budget": f"used the --time-budget of {cfg.time_budget:g} s" if cfg.time_budget else "",
                  "interrupted": "interrupted; state saved, continue with --resume latest",
                  "nan": "stopped on a non-finite loss"}[stopped]
        self.say(f"stopped at step {self.step}: {reason}")
        return TrainSummary(
            run_dir=str(self.run_dir), checkpoint=str(checkpoint) if checkpoint else None, arch=self.mcfg.arch,
            steps=self.step, tokens=self.tokens, final_loss=last_loss, dev_loss=evaluation.get("dev_loss"),
            dev_bpb=evaluation.get("dev_bpb"), tokens_per_s=tokens_per_s, mfu=mfu, params=self.raw.num_params(),
            non_embedding_params=self.raw.num_params(non_embedding=True), stopped=stopped,
            wall_s=time.perf_counter() - self.t_start, sample=sample, stage=self.stage.name,
            evaluation=evaluation)

    def _plot(self) -> None:
        from tinylm.train.plot import plot_runs

        with contextlib.suppress(TinyLMError):  # nothing logged yet (stopped before its first step)
            plot_runs([self.run_dir])
