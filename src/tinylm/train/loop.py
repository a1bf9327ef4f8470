"""The one training loop: `run_training(EngineConfig, stage=...) -> TrainSummary`, for every stage.

Pretraining (`stages/pretrain/stage.py`), SFT (`stages/sft/stage.py`) and the later stages plug in as a `Stage`
(`train/stage.py`): their model, batches, loss and evaluation. Everything else is here, once.

Setup, in order: the run folder and its lock, the checkpoint to resume, the stage's model config,
the run's choices (autocast dtype, attention kernel, compile: `runtime/run_choices.py`, decided
once on that config, and final before the stage can read them), the model, the optimizer and the
schedule (`train/run_setup.py`), and a resumed run's state (`train/run_checkpoint.py`).

One step is: set the learning rate from the schedule, accumulate gradients over micro-batches, clip,
check the loss is finite, take the optimizer step. Around it: evaluation every `eval_every` steps,
checkpoints every `checkpoint_every`, a log row every `log_every`, and the stop rules (max steps,
max tokens, time budget, Ctrl-C, NaN), all decided identically on every rank because the decision
travels with the loss all-reduce.
"""

from __future__ import annotations

import contextlib
import functools
import math
import time
from pathlib import Path
from typing import Any

import torch
import torch.distributed as dist

from tinylm.checkpoint import check_same_model, checkpoint_model_config, list_checkpoints, newest_resumable
from tinylm.errors import TinyLMError, is_oom
from tinylm.metrics import MetricsLogger
from tinylm.runtime.compile_policy import eager_blocks
from tinylm.runtime.device import configure_backends, empty_cache, peak_flops
from tinylm.runtime.distributed import (
    DistEnv,
    all_gather_objects,
    all_reduce_sum,
    cleanup,
    init_distributed,
    is_peer_failure,
    unanswered,
)
from tinylm.runtime.run_choices import RunShape, decide_run_choices
from tinylm.train.config import EngineConfig
from tinylm.train.faults import StepInterrupted, StopSignal, oom_message
from tinylm.train.mfu import model_flops_utilization
from tinylm.train.optim import members
from tinylm.train.plot import plot_runs
from tinylm.train.progress import Progress, Throughput
from tinylm.train.run_checkpoint import RunCheckpoints, restore_rank_rng
from tinylm.train.run_clock import RunClock
from tinylm.train.run_header import header_lines
from tinylm.train.run_lock import RunLock
from tinylm.train.run_setup import (
    acquire_run_lock,
    build_optimization,
    build_training_model,
    open_run_dir,
    planned_steps,
    reset_metrics_log,
)
from tinylm.train.run_start import check_hardware, open_logger, resume_point
from tinylm.train.run_status import RunStatus
from tinylm.train.schedule import apply_schedules
from tinylm.train.stage import Stage, StageContext, StageStart
from tinylm.train.step import accumulate_gradients, clip_gradients
from tinylm.train.summary import RESUME_HINT, TrainSummary, budget_reached, nan_message, stop_reason

__all__ = ["TrainSummary", "run_training"]


def run_training(config: EngineConfig, *, stage: Stage, on_interrupt: str = RESUME_HINT,
                 **changes: Any) -> TrainSummary:
    """Train as `config` says (fields can be changed by keyword) with `stage` (pretraining, SFT, DPO, RL...).

    With `resume`, the run continues with its own options except those `config` gives (train/resume_options.py).
    `on_interrupt` is what a run stopped by Ctrl-C says about going on: a caller that cannot resume says its own.
    Under torchrun every rank calls this; a process group started by the caller is left running.
    """
    cfg = config.replace(**changes) if changes else config
    owns_group = not (dist.is_available() and dist.is_initialized())
    env, device = init_distributed(cfg.device, cfg.dist_timeout)
    threads = torch.get_num_threads()
    graceful = False
    try:
        summary = _Run(cfg, env, device, stage, on_interrupt).train()
        graceful = True
        return summary
    finally:
        torch.set_num_threads(threads)  # --threads is for this run, not for the caller's process
        if owns_group:
            cleanup(env, graceful)


def forwarded_tokens(stage: Stage, batches: list[Any], planned: int) -> int:
    """This rank's tokens through the forward this step: what tokens/s and MFU count. A stage whose rows are
    cut shorter than seq_len (rollouts, pairs) says how many; the `planned` batch x seq_len otherwise."""
    return sum(planned if n is None else n for n in (stage.batch_tokens(b) for b in batches))



def step_weight(stage: Stage, env: DistEnv, device: torch.device, batches: list[Any]) -> float:
    """Units (target tokens, pairs...) of the whole step: all micro-batches, all ranks."""
    weights = [stage.batch_weight(b) for b in batches]
    if stage.constant_weight or not env.enabled:
        return float(sum(weights) * (env.world_size if stage.constant_weight else 1))
    return float(all_reduce_sum(torch.tensor(float(sum(weights)), device=device), env))


def run_error(error: Exception, env: DistEnv, timeout_s: float | None) -> Exception:
    """What a failed run reports: a collective that lost a peer (hung or dead) becomes one line naming it;
    anything else stays itself."""
    if env.enabled and is_peer_failure(error):
        return TinyLMError(unanswered(env, error, timeout_s))
    return error


class _Run:
    """One training run's state; `train()` is the whole run, `_setup` and `_loop` its two halves."""

    def __init__(self, cfg: EngineConfig, env: DistEnv, device: torch.device, stage: Stage,
                 on_interrupt: str = RESUME_HINT):
        self.cfg, self.env, self.device, self.stage, self.on_interrupt = cfg, env, device, stage, on_interrupt
        self.t_start = time.perf_counter()
        if cfg.threads:
            torch.set_num_threads(cfg.threads)
        configure_backends(device)
        check_hardware(cfg, env, device)  # a bad --dtype fails here, before any folder is touched
        self.progress = Progress(cfg.max_steps, enabled=False)  # replaced once the start step is known
        self.lock: RunLock | None = None
        self.status: RunStatus | None = None  # RUN/status.json, once the run folder is known
        self.target = ""  # the stage's reason to stop at an evaluation, once one gave it

    def say(self, line: str) -> None:
        if self.env.is_main:
            self.progress.write(line)

    def train(self) -> TrainSummary:
        try:
            return self._train()
        except KeyboardInterrupt:  # a second Ctrl-C: at once, without the checkpoint of a polite stop
            if self.status is not None:
                self.status.ended("interrupted", "SIGINT", self.step, "interrupted at once (Ctrl-C twice)")
            raise
        except Exception as exc:
            error = run_error(exc, self.env, self.cfg.dist_timeout)  # a lost peer: one line naming it
            if self.status is not None:
                self.status.failed(str(error) if isinstance(error, TinyLMError) else f"{type(error).__name__}: {error}")
            raise error from (None if error is not exc else exc.__cause__)  # (the error itself keeps its cause)
        finally:
            if self.lock is not None:
                self.lock.release()

    def _train(self) -> TrainSummary:
        self._setup()
        cfg, env = self.cfg, self.env  # a resumed run's config is known after setup
        for line in header_lines(self):
            self.say(line)
        logger = open_logger(self.run_dir, cfg, env, self.state, self.say,
                             {"model": self.mcfg.to_dict(), "train": cfg.to_dict(), "stage": self.stage.name})
        self.progress = Progress(self.planned, initial=self.step, enabled=cfg.progress and env.is_main)
        self.status.running(self.step, self.planned)
        try:
            with StopSignal() as stop:
                summary = self._loop(stop, logger)
            self.status.ended(summary.stopped, stop.requested, summary.steps,
                              stop_reason(summary.stopped, self.cfg, self.target, self.on_interrupt))
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

    # ---- setup: everything before the first step, every choice made once --------------------------
    def _setup(self) -> None:
        cfg, env, stage = self.cfg, self.env, self.stage
        self.run_dir = open_run_dir(cfg, env, stage)
        cfg, point = resume_point(cfg, self.run_dir, env, self.device, self.say)  # the run's own options
        self.cfg = cfg
        self.lock = RunLock(self.run_dir) if env.is_main else None
        acquire_run_lock(self.lock, self.run_dir, env, self.say)
        self.status = RunStatus(self.run_dir, stage.name, active=env.is_main, world_size=env.world_size)
        self.ckpt, self.state = point.checkpoint, point.state
        start = StageStart(cfg=cfg, env=env, device=self.device, run_dir=self.run_dir, resume=point.resume,
                           start_from=point.start_from, say=self.say)
        self.mcfg = stage.configure(start)
        if point.resume is not None:
            check_same_model(checkpoint_model_config(point.resume), self.mcfg, point.resume)
        self.seq_len = cfg.seq_len or self.mcfg.context_length
        self.plan = stage.plan_batches(cfg, self.seq_len, env.world_size)
        done = int(self.state["step"]) if self.state is not None else 0
        self.planned = planned_steps(cfg, self.plan)  # in all, counted across resumes
        shape = RunShape(self.mcfg, cfg.batch_size, self.seq_len, self.device, time_budget_s=cfg.time_budget,
                         planned_passes=max(0, self.planned - done) * cfg.grad_accum,
                         shapes=self.plan.shapes(done, self.planned))
        self.choices = decide_run_choices(cfg.dtype, cfg.attention, cfg.compile, shape, saved=self.state)
        stage.enter(StageContext.final(start, self.choices, self.plan))
        reset_metrics_log(self.run_dir, env, self.state)

        self.raw, self.train_model = build_training_model(stage, cfg, env, self.device, self.mcfg, self.choices)
        self.optimizer, self.scaler, self.schedule = build_optimization(self.raw, cfg, self.device,
                                                                        self.choices.dtype, self.plan)
        self.checkpoints = RunCheckpoints(cfg, env, stage, self.run_dir, self.raw, self.mcfg, self.optimizer,
                                          self.scaler, self.schedule, self.choices, self.say, self.plan)
        self.step, self.tokens = 0, 0
        self.clock = RunClock.resumed(self.state if point.resume is not None else None)
        if point.resume is not None and self.state is not None:
            self.step, self.tokens = self.checkpoints.restore(self.state, point.resume)
        self.peak = peak_flops(self.device, self.choices.dtype)

    # ---- the loop ----------------------------------------------------------------------------------
    def _loop(self, stop: StopSignal, logger: MetricsLogger) -> TrainSummary:
        cfg, env, stage = self.cfg, self.env, self.stage
        params = [p for p in self.raw.parameters() if p.requires_grad]
        start_step = self.step
        last_loss: float | None = None
        evaluation: dict[str, float] = {}
        evaluated_at = -1
        total_tokens, trained_before = 0.0, self.clock.training
        # metrics.jsonl's tokens/s is over the steps since its last row, the printed line's over those since the last
        # line: each a fresh measurement, never the figure of an earlier row or line
        window, shown = Throughput(), Throughput()
        flops_per_token = functools.cache(self.raw.flops_per_token)  # by row length: a warmup has a few
        mfu: float | None = None
        last_step_time, last_tail = self.clock.step_seconds, 0.0
        stopped = budget_reached(cfg, self.step, self.tokens, self.clock.planned_end()) or (
            "time_budget" if self.clock.spent(cfg.time_budget) else None)
        if stage.evaluate_at_start and self.state is None:
            evaluation = self._evaluate(logger)  # step 0: where the run starts from
        restore_rank_rng(self.state, env.rank)  # last, so nothing in setup can shift the random streams
        clock = self.clock
        clock.begin(time.perf_counter())
        while stopped is None:
            t0 = time.perf_counter()
            # under a time budget the lr follows the clock where it leads: rank 0's clock, which every rank got
            # with the last step's flags (the last step predicts how long this one takes)
            apply_schedules(self.optimizer, self.schedule, cfg.weight_decay_schedule, self.step, clock.planned_end())
            try:
                batches = stage.draw_step(self.step, cfg.grad_accum)
            except StepInterrupted:  # Ctrl-C while the step waited on work it can drop (an RL reward)
                stopped = "interrupted"
                break
            stage.begin_step(self.raw, batches)  # a statistic of the whole step, if the stage has one (KTO)
            weight = step_weight(self.stage, self.env, self.device, batches)
            if weight <= 0:
                raise TinyLMError(f"step {self.step + 1} has nothing to learn from (every target is masked): "
                                  "check the data")
            loss_sum, metric_sums = accumulate_gradients(self.train_model, batches, stage.loss, weight,
                                                         env.world_size, self.device, self.choices.dtype, raw=self.raw,
                                                         scaler=self.scaler)
            if self.scaler is not None:
                for member in members(self.optimizer):
                    self.scaler.unscale_(member)
            grad_norm = clip_gradients(params, cfg.grad_clip)
            # stop when the next step would end past the budget: this step's rest and one more, as long as the last
            reading = time.perf_counter() if cfg.time_budget is not None else t0  # no extra reading unasked
            now = clock.at(reading)
            next_step = last_step_time * self.plan.tokens_ratio(self.step + 1, self.step - 1)  # a ramp doubles it
            over_time = cfg.time_budget is not None and env.is_main and now + last_tail + next_step > cfg.time_budget
            names = sorted(metric_sums)
            ws = float(env.world_size)
            forwarded = forwarded_tokens(stage, batches, planned=self.plan.micro_batch_tokens(self.step))
            flags = torch.stack([loss_sum / weight, *(metric_sums[k] / weight for k in names),
                                 torch.tensor(float(forwarded), device=self.device),
                                 grad_norm.float().to(self.device) / ws,
                                 torch.tensor(float(stop.requested is not None) / ws, device=self.device),
                                 torch.tensor(float(over_time) / ws, device=self.device),
                                 torch.tensor(now if env.is_main else 0.0, device=self.device)])
            reduced = all_reduce_sum(flags, env).tolist()
            loss_value, *metric_values, step_tokens, norm_value, interrupted, out_of_time, agreed = reduced
            clock.agree(agreed)
            if not math.isfinite(loss_value) or (self.scaler is None and not math.isfinite(norm_value)):
                self.optimizer.zero_grad(set_to_none=True)
                stopped = "nan"
                self.say(nan_message(loss_value, norm_value, self.step + 1, self.run_dir))
                break
            if self.scaler is not None:
                for member in members(self.optimizer):
                    self.scaler.step(member)
                self.scaler.update()
            else:
                self.optimizer.step()
            self.optimizer.zero_grad(set_to_none=True)
            self.tokens += self.plan.step_tokens(self.step)
            self.step += 1
            last_loss = loss_value
            step_end = time.perf_counter()
            step_time = last_step_time = clock.stepped(step_end - t0)
            last_tail = step_end - reading
            total_tokens += step_tokens
            window.add(step_tokens, step_time)
            shown.add(step_tokens, step_time)
            lr = self.optimizer.param_groups[0]["lr"]
            stopped = clock.stopped("interrupted" if interrupted > 0 else "time_budget" if out_of_time > 0
                                    else budget_reached(cfg, self.step, self.tokens), cfg.time_budget)
            flops = flops_per_token(self.plan.shape(self.step - 1)[1])  # the rows just trained on
            if self.step % cfg.log_every == 0 or stopped is not None or self.step == start_step + 1:
                tokens_per_s = window.rate()
                mfu = model_flops_utilization(flops, tokens_per_s, self.peak, env.world_size)
                logger.log({"step": self.step, "loss": loss_value, "lr": lr, "tokens": self.tokens, "mfu": mfu,
                            "tokens_per_s": tokens_per_s, "grad_norm": norm_value, "elapsed_s": clock.at(step_end),
                            "train_s": clock.training, **dict(zip(names, metric_values))})
                window = Throughput()
                self.status.running(self.step)
            rate = shown.rate()
            if self.progress.update(self.step, loss_value, lr, rate,
                                    model_flops_utilization(flops, rate, self.peak, env.world_size)):
                shown = Throughput()
            if cfg.eval_every and self.step % cfg.eval_every == 0:
                evaluation = self._evaluate(logger) or evaluation
                evaluated_at = self.step
                if stopped is None and (why := stage.target_reached(evaluation)):
                    stopped, self.target = "target", why
            self.checkpoints.periodic(self.step, self.tokens, {"loss": loss_value, **evaluation}, clock, stopped)
        self.progress.close()
        return self._finish(stopped, start_step, last_loss, evaluation, evaluated_at, logger,
                            tokens_per_s=total_tokens / max(clock.training - trained_before, 1e-9), mfu=mfu)

    def _evaluate(self, logger: MetricsLogger | None) -> dict[str, float]:
        """The stage's evaluation, logged as one row (nothing when the stage has nothing to evaluate)."""
        result = self.stage.evaluate(self.raw)
        samples = self.stage.take_samples()  # the replies behind the evaluation, if the stage keeps any
        if logger is not None:
            logger.log_evaluation(self.step, self.tokens, result, samples)
        return result

    # ---- the end -----------------------------------------------------------------------------------
    def _finish(self, stopped: str, start_step: int, last_loss: float | None, evaluation: dict[str, float],
                evaluated_at: int, logger: MetricsLogger, tokens_per_s: float, mfu: float | None) -> TrainSummary:
        env = self.env
        checkpoint: Path | None = None
        sample = None
        if stopped != "nan":
            if evaluated_at != self.step:
                # a resume with nothing left to do logged this step already
                evaluation = self._evaluate(logger if self.step > start_step else None) or evaluation
            existing = list_checkpoints(self.run_dir) if env.is_main else []
            must_save = all_gather_objects(self.step > start_step or not existing, env)[0]  # rank 0 decides
            if must_save:
                checkpoint = self.checkpoints.save(self.step, self.tokens, {"loss": last_loss, **evaluation},
                                                   self.clock)
            elif existing:
                checkpoint = newest_resumable(self.run_dir)[0] or existing[-1]
            if env.is_main:
                with contextlib.suppress(TinyLMError):  # nothing logged yet (stopped before its first step)
                    plot_runs([self.run_dir])
                with eager_blocks():  # decoding must not compile a graph per cache length
                    sample = self.stage.finish(self.raw, checkpoint)
                if self.step > start_step:  # a resume with nothing left to do wrote this step's sample already
                    logger.log_samples(self.step, self.stage.take_samples())
        else:
            found = list_checkpoints(self.run_dir) if env.is_main else []
            checkpoint = found[-1] if found else None
        self.say(f"stopped at step {self.step}: {stop_reason(stopped, self.cfg, self.target, self.on_interrupt)}")
        return TrainSummary(
            run_dir=str(self.run_dir), checkpoint=str(checkpoint) if checkpoint else None, arch=self.mcfg.arch,
            steps=self.step, tokens=self.tokens, final_loss=last_loss, dev_loss=evaluation.get("dev_loss"),
            dev_bpb=evaluation.get("dev_bpb"), tokens_per_s=tokens_per_s, mfu=mfu, params=self.raw.num_params(),
            non_embedding_params=self.raw.num_params(non_embedding=True), stopped=stopped,
            wall_s=time.perf_counter() - self.t_start, sample=sample, stage=self.stage.name,
            evaluation=evaluation)
