"""The training loop: `run_training(TrainConfig) -> TrainSummary`, used by `tinylm train` and `tinylm compare`.

One step is: set the learning rate from the schedule, accumulate gradients over micro-batches, clip,
check the loss is finite, take the optimizer step. Around it: evaluation every `eval_every` steps,
checkpoints every `checkpoint_every`, a log row every `log_every`, and the stop rules (max steps,
max tokens, time budget, Ctrl-C, NaN), all decided identically on every rank because the decision
travels with the loss all-reduce.

Exact resume: a checkpoint holds the weights, the optimizer state, every RNG state (per rank) and the
data loader's position; the schedule is a pure function of the step. Restoring all of it makes the
continued run compute, on CPU, bit-identical losses to a run that never stopped.
"""

from __future__ import annotations

import contextlib
import math
import time
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

import torch
import torch.distributed as dist
from torch import nn

from tinylm.config import ModelConfig
from tinylm.device import autocast, configure_backends, describe, empty_cache, peak_flops, resolve_dtype
from tinylm.errors import TinyLMError
from tinylm.models.factory import build_model
from tinylm.checkpoint import (
    TOKENIZER,
    check_same_model,
    checkpoint_model_config,
    has_train_state,
    list_checkpoints,
    load_train_state,
    load_weights,
    save_checkpoint,
)
from tinylm.train.config import TrainConfig
from tinylm.train.data import resolve_data_dir
from tinylm.train.distributed import (
    DistEnv,
    all_gather_objects,
    all_reduce_sum,
    barrier,
    cleanup,
    init_distributed,
    wrap_model,
)
from tinylm.train.evaluate import bits_per_byte, evaluate
from tinylm.train.faults import StopSignal, is_oom, oom_message
from tinylm.train.metrics import METRICS, MetricsLogger, truncate_after
from tinylm.train.mfu import model_flops_utilization
from tinylm.train.optim import AnyOptimizer, build_optimizer, members
from tinylm.train.progress import Progress
from tinylm.train.rng import capture_rng, restore_rng, seed_everything
from tinylm.train.run_dir import choose_run_dir, find_resume_checkpoint
from tinylm.train.schedule import LRSchedule, apply_lr
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

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


def run_training(config: TrainConfig | None = None, *, model_config: ModelConfig | None = None,
                 **changes: Any) -> TrainSummary:
    """Train one model as `config` says (fields can be changed by keyword); the summary comes back.

    `model_config` replaces the preset/arch/overrides of `config` with an exact model. Under torchrun
    every rank calls this; a process group started by the caller is left running.
    """
    cfg = config or TrainConfig()
    if changes:
        cfg = cfg.replace(**changes)
    owns_group = not (dist.is_available() and dist.is_initialized())
    env, device = init_distributed(cfg.device)
    threads = torch.get_num_threads()
    graceful = False
    try:
        summary = _Run(cfg, env, device, model_config).train()
        graceful = True
        return summary
    finally:
        torch.set_num_threads(threads)  # --threads is for this run, not for the caller's process
        if owns_group:
            cleanup(env, graceful)


class _Run:
    """One training run's state; `train()` is the loop, the other methods are its parts."""

    def __init__(self, cfg: TrainConfig, env: DistEnv, device: torch.device, model_config: ModelConfig | None):
        self.cfg, self.env, self.device = cfg, env, device
        self.t_start = time.perf_counter()
        if cfg.threads:
            torch.set_num_threads(cfg.threads)
        configure_backends(device)
        self.dtype = resolve_dtype(device, cfg.dtype)
        mcfg = model_config or cfg.model_config()
        if cfg.gradient_checkpointing and not mcfg.gradient_checkpointing:
            mcfg = mcfg.replace(gradient_checkpointing=True)
        self.mcfg = mcfg
        self.seq_len = cfg.seq_len or mcfg.context_length
        if self.seq_len > mcfg.context_length:
            raise TinyLMError(f"--seq-len {self.seq_len} exceeds the model's context_length {mcfg.context_length}")
        if cfg.fsdp and cfg.optimizer == "muon":
            raise TinyLMError("Muon needs whole matrices and --fsdp shards them; use --optimizer adamw with --fsdp")
        if cfg.fsdp and self.dtype == torch.float16:
            raise TinyLMError("--dtype fp16 needs a sharded loss scaler that --fsdp does not set up; use --dtype bf16")
        if cfg.fsdp and not env.enabled:
            raise TinyLMError("--fsdp shards across processes: launch with torchrun --nproc_per_node=N")
        self.tokens_per_step = cfg.batch_size * cfg.grad_accum * self.seq_len * env.world_size
        self.progress = Progress(cfg.max_steps, enabled=False)  # replaced once the start step is known

    # ---- messages --------------------------------------------------------------------------------
    def say(self, line: str) -> None:
        if self.env.is_main:
            self.progress.write(line)

    # ---- setup -----------------------------------------------------------------------------------
    def _setup(self) -> None:
        cfg, env = self.cfg, self.env
        chosen = choose_run_dir(cfg.out, cfg.preset, cfg.arch, cfg.resume) if env.is_main else None
        self.run_dir = Path(all_gather_objects(str(chosen), env)[0])
        self.ckpt = find_resume_checkpoint(cfg.resume, self.run_dir)
        self.state: dict[str, Any] | None = None
        if self.ckpt is not None and not has_train_state(self.ckpt):
            self._adopt_weights_only_checkpoint()
        elif self.ckpt is not None:
            check_same_model(checkpoint_model_config(self.ckpt), self.mcfg, self.ckpt)
            self.state = load_train_state(self.ckpt)
        elif cfg.resume is not None:
            self.say(f"no checkpoint in {self.run_dir} yet: starting a fresh run")
        # the data is checked (or prepared) before the model is built: a mismatch fails in a second
        self.data_dir = resolve_data_dir(cfg.data, self.mcfg, env, progress=cfg.progress)
        if env.is_main:
            self.run_dir.mkdir(parents=True, exist_ok=True)
            if self.state is None:
                (self.run_dir / METRICS).unlink(missing_ok=True)  # a fresh run starts a fresh log
            else:
                truncate_after(self.run_dir, int(self.state["step"]))  # steps past the checkpoint are redone
        barrier(env)

        seed_everything(cfg.seed)  # identical initial weights on every rank
        raw = build_model(self.mcfg)
        if self.ckpt is not None:
            load_weights(raw, self.ckpt)
        raw.to(self.device)
        if env.enabled:
            torch.manual_seed(cfg.seed + 7919 * env.rank)  # but independent dropout noise per rank
        self.raw = raw
        train_model: nn.Module = raw
        if cfg.fsdp:
            wrap_model(raw, env, self.device, fsdp=True)  # shards in place
        if cfg.compile:
            train_model = torch.compile(raw)  # type: ignore[assignment]
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

        from tinylm.data.loader import BatchLoader, iter_sequential

        self.loader = BatchLoader(self.data_dir / "train.bin", cfg.batch_size, self.seq_len, seed=cfg.seed,
                                  rank=env.rank, world_size=env.world_size, device=str(self.device))
        # eval_batches global batches (batch_size x world_size rows each): the same dev rows whatever the
        # number of processes; each rank takes every world_size-th micro-batch, an equal share
        dev_batches = list(iter_sequential(self.data_dir / "dev.bin", cfg.batch_size, self.seq_len,
                                           max_batches=cfg.eval_batches * env.world_size))
        if len(dev_batches) >= env.world_size:
            usable = len(dev_batches) - len(dev_batches) % env.world_size
            dev_batches = dev_batches[env.rank:usable:env.world_size]
        self.dev_batches = dev_batches
        from tinylm.data.shards import read_sidecar

        dev = read_sidecar(self.data_dir, "dev")
        self.dev_tokens, self.dev_bytes = int(dev["tokens"]), int(dev["bytes"])

        self.step, self.tokens = 0, 0
        if self.state is not None:
            self._restore(self.state)
        self.peak = peak_flops(self.device, self.dtype)
        self.flops_per_token = raw.flops_per_token(self.seq_len)

    def _adopt_weights_only_checkpoint(self) -> None:
        """A checkpoint without train state (e.g. from `tinylm import`): its weights and model config,
        with a fresh optimizer, schedule and step count, i.e. continued pretraining or fine-tuning."""
        saved = checkpoint_model_config(self.ckpt)
        if self.cfg.gradient_checkpointing:
            saved = saved.replace(gradient_checkpointing=True)
        self.mcfg = saved
        self.seq_len = self.cfg.seq_len or saved.context_length
        if self.seq_len > saved.context_length:
            raise TinyLMError(f"--seq-len {self.seq_len} exceeds the checkpoint's context_length "
                              f"{saved.context_length}")
        self.tokens_per_step = self.cfg.batch_size * self.cfg.grad_accum * self.seq_len * self.env.world_size
        self.say(f"{self.ckpt} holds weights only: training them from step 0 with a fresh optimizer "
                 f"(model config taken from the checkpoint)")

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
        self.loader.load_state_dict(state["loader"])  # batch k is a function of k: any world size continues
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
        weights = self._model_state()
        optimizer = self._optimizer_state()
        rngs = all_gather_objects(capture_rng(), self.env)
        path = None
        if self.env.is_main:
            train_state = {"step": self.step, "tokens": self.tokens, "optimizer": optimizer,
                           "loader": self.loader.state_dict(), "rng": rngs, "schedule": self.schedule.to_dict(),
                           "scaler": self.scaler.state_dict() if self.scaler is not None else None,
                           "world_size": self.env.world_size}
            meta = {"tokens": self.tokens, "train": self.cfg.to_dict(), "data": str(self.data_dir),
                    "params": self.raw.num_params(), "metrics": metrics}
            path = save_checkpoint(self.run_dir, self.step, self.raw, self.mcfg, state_dict=weights,
                                   tokenizer_file=self.data_dir / TOKENIZER, train_state=train_state, meta=meta,
                                   keep_last=self.cfg.keep_last or None)
        barrier(self.env)
        return path

    # ---- evaluation --------------------------------------------------------------------------------
    def evaluate(self) -> tuple[float, float]:
        loss = evaluate(self.raw, self.dev_batches, self.device, self.dtype, self.env)
        return loss, bits_per_byte(loss, self.dev_tokens, self.dev_bytes)

    # ---- the loop ----------------------------------------------------------------------------------
    def train(self) -> TrainSummary:
        cfg, env = self.cfg, self.env
        self._setup()
        self._announce()
        logger = MetricsLogger(self.run_dir, active=env.is_main, tensorboard=cfg.tensorboard, wandb=cfg.wandb,
                               run_config={"model": self.mcfg.to_dict(), "train": cfg.to_dict()})
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
        self.say(f"data: {self.data_dir}")
        self.say(f"model: {self.cfg.preset} {m.arch}, {self.raw.num_params():,} parameters "
                 f"({self.raw.num_params(non_embedding=True):,} non-embedding), context {m.context_length}")
        self.say(f"device: {describe(self.device)} x {self.env.world_size}, dtype {str(self.dtype)[6:]}, "
                 f"{self.tokens_per_step:,} tokens/step (batch {self.cfg.batch_size} x accum {self.cfg.grad_accum} "
                 f"x seq {self.seq_len} x {self.env.world_size} proc)")
        if self.ckpt is not None:
            self.say(f"resumed from {self.ckpt} at step {self.step}")

    def _budget_reached(self) -> str | None:
        if self.step >= self.cfg.max_steps:
            return "max_steps"
        if self.cfg.max_tokens is not None and self.tokens >= self.cfg.max_tokens:
            return "max_tokens"
        return None

    def _loop(self, stop: StopSignal, logger: MetricsLogger) -> TrainSummary:
        cfg, env = self.cfg, self.env
        params = [p for p in self.raw.parameters() if p.requires_grad]
        start_step = self.step
        last_loss: float | None = None
        dev_loss = dev_bpb = None
        evaluated_at = -1
        window_tokens, window_time, total_train_time = 0, 0.0, 0.0
        tokens_per_s, mfu = 0.0, None
        last_step_time = 0.0
        stopped = self._budget_reached()
        self._restore_rng()
        loop_start = time.perf_counter()
        while stopped is None:
            t0 = time.perf_counter()
            apply_lr(self.optimizer, self.schedule.factor(self.step))
            loss = accumulate_gradients(self.train_model, self.loader.next_batch, cfg.grad_accum, self.device,
                                        self.dtype, raw=self.raw, scaler=self.scaler)
            if self.scaler is not None:
                for member in members(self.optimizer):
                    self.scaler.unscale_(member)
            grad_norm = clip_gradients(params, cfg.grad_clip)
            # stop when the next step would end past the budget (the last full step predicts its length)
            over_time = (cfg.time_budget is not None and env.is_main
                         and time.perf_counter() - loop_start + last_step_time > cfg.time_budget)
            flags = torch.stack([loss.float(), grad_norm.float().to(self.device),
                                 torch.tensor(float(stop.requested is not None), device=self.device),
                                 torch.tensor(float(over_time), device=self.device)])
            loss_value, norm_value, interrupted, out_of_time = (all_reduce_sum(flags, env) / env.world_size).tolist()
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
            window_tokens += self.tokens_per_step
            window_time += step_time
            total_train_time += step_time
            lr = self.optimizer.param_groups[0]["lr"]
            stopped = ("interrupted" if interrupted > 0 else "time_budget" if out_of_time > 0
                       else self._budget_reached())
            if self.step % cfg.log_every == 0 or stopped is not None or self.step == start_step + 1:
                tokens_per_s = window_tokens / max(window_time, 1e-9)
                mfu = model_flops_utilization(self.flops_per_token, tokens_per_s, self.peak, env.world_size)
                logger.log({"step": self.step, "loss": loss_value, "lr": lr, "tokens": self.tokens,
                            "tokens_per_s": tokens_per_s, "mfu": mfu, "grad_norm": norm_value,
                            "elapsed_s": time.perf_counter() - loop_start})
                window_tokens, window_time = 0, 0.0
            self.progress.update(self.step, loss_value, lr, tokens_per_s, mfu)
            if cfg.eval_every and self.step % cfg.eval_every == 0 and self.dev_batches:
                dev_loss, dev_bpb = self.evaluate()
                evaluated_at = self.step
                logger.log({"step": self.step, "dev_loss": dev_loss, "dev_bpb": dev_bpb, "tokens": self.tokens})
            if cfg.checkpoint_every and self.step % cfg.checkpoint_every == 0 and stopped is None:
                self.save({"loss": loss_value, "dev_loss": dev_loss})
        self.progress.close()
        return self._finish(stopped, start_step, last_loss, dev_loss, dev_bpb, evaluated_at, logger,
                            tokens_per_s=self._overall_rate(total_train_time, start_step), mfu=mfu)

    def _overall_rate(self, train_time: float, start_step: int) -> float:
        trained = (self.step - start_step) * self.tokens_per_step
        return trained / train_time if train_time > 0 else 0.0

    def _report_nan(self, loss: float, norm: float) -> None:
        good = list_checkpoints(self.run_dir)
        kept = f"the last good checkpoint is {good[-1]}" if good else "no checkpoint was saved yet"
        what = f"loss is {loss}" if not math.isfinite(loss) else f"gradient norm is {norm}"
        self.say(f"tinylm: {what} at step {self.step + 1}; stopping without saving the broken weights; {kept}. "
                 "Try a lower --lr, more --warmup-steps or --grad-clip 1.0.")

    def _finish(self, stopped: str, start_step: int, last_loss: float | None, dev_loss: float | None,
                dev_bpb: float | None, evaluated_at: int, logger: MetricsLogger, tokens_per_s: float,
                mfu: float | None) -> TrainSummary:
        cfg, env = self.cfg, self.env
        checkpoint: Path | None = None
        sample = None
        if stopped != "nan":
            if evaluated_at != self.step and self.dev_batches:
                dev_loss, dev_bpb = self.evaluate()
                if self.step > start_step:  # a resume with nothing left to do logged this step already
                    logger.log({"step": self.step, "dev_loss": dev_loss, "dev_bpb": dev_bpb, "tokens": self.tokens})
            existing = list_checkpoints(self.run_dir) if env.is_main else []
            must_save = all_gather_objects(self.step > start_step or not existing, env)[0]  # rank 0 decides
            if must_save:
                checkpoint = self.save({"loss": last_loss, "dev_loss": dev_loss, "dev_bpb": dev_bpb})
            elif existing:
                checkpoint = existing[-1]
            if env.is_main:
                self._plot()
                if cfg.sample_tokens > 0 and not cfg.fsdp:  # a sharded model would need every rank in lockstep
                    sample = self._sample()
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
            steps=self.step, tokens=self.tokens, final_loss=last_loss, dev_loss=dev_loss, dev_bpb=dev_bpb,
            tokens_per_s=tokens_per_s, mfu=mfu, params=self.raw.num_params(),
            non_embedding_params=self.raw.num_params(non_embedding=True), stopped=stopped,
            wall_s=time.perf_counter() - self.t_start, sample=sample)

    def _plot(self) -> None:
        from tinylm.train.plot import plot_runs

        with contextlib.suppress(TinyLMError):  # nothing logged yet (stopped before its first step)
            plot_runs([self.run_dir])

    def _sample(self) -> str | None:
        tokenizer_file = self.data_dir / TOKENIZER
        if not tokenizer_file.is_file():
            return None
        from tinylm.tokenizer import load_tokenizer
        from tinylm.train.sample import sample_text

        tokenizer = load_tokenizer(tokenizer_file)
        with autocast(self.device, self.dtype):
            return sample_text(self.raw, tokenizer, self.cfg.prompt, self.cfg.sample_tokens,
                               self.cfg.temperature, self.cfg.top_k, seed=self.cfg.seed)
