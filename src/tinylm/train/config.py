"""TrainConfig: every knob of a training run in one dataclass, shared by `tinylm train` and Python callers.

The command line maps one option to one field (`--max-steps` -> `max_steps`), so a config file, the
CLI and `run_training(TrainConfig(...))` (what `tinylm compare` uses) all describe a run the same way.
The defaults are the `make demo` run: the `tiny` modern preset on the embedded Python-stdlib corpus,
sized to finish in about five minutes on two CPU cores, data preparation included.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass, field
from typing import Any

from tinylm.config import ModelConfig
from tinylm.errors import TinyLMError

# Measured on 2 CPU cores (torch 2.13): tiny modern trains at ~14.7k tokens/s at batch 16 x 256 (0.28 s
# per step), so 600 steps (2.5M tokens, ~0.7 epoch of pystdlib) take ~2.8 minutes; data preparation
# (~4 s), startup, evals and the sample bring `make demo` to ~3 minutes, with headroom for slower CPUs.
DEMO_STEPS = 600


@dataclass
class TrainConfig:
    # what to train
    preset: str = "tiny"
    arch: str = "modern"
    overrides: dict[str, Any] = field(default_factory=dict)  # model fields, as from --set name=value
    data: str | None = None  # a prepared data folder; None = the default corpus, prepared if needed
    out: str | None = None  # run folder; None = runs/<preset>-<arch> (a fresh suffix if it is taken)
    seed: int = 1337
    # where and how
    device: str = "auto"
    dtype: str = "auto"
    threads: int | None = None
    compile: str = "auto"  # auto (only when the measured compile time pays back) | on | off
    attention: str = "auto"  # auto (blockwise on a CPU where it measures faster) | sdpa | blockwise
    gradient_checkpointing: bool = False
    fsdp: bool = False
    # batch
    batch_size: int = 16  # rows per micro-batch per process
    grad_accum: int = 1  # micro-batches per optimizer step
    seq_len: int | None = None  # None = the model's context length
    # budgets (the first one reached stops the run)
    max_steps: int = DEMO_STEPS  # total optimizer steps, counted across resumes
    max_tokens: int | None = None
    time_budget: float | None = None  # seconds of training in this invocation
    # optimizer and schedule
    optimizer: str = "adamw"
    lr: float = 3e-3
    weight_decay: float = 0.1
    beta1: float = 0.9
    beta2: float = 0.95
    muon_lr: float = 0.02
    muon_momentum: float = 0.95
    grad_clip: float = 1.0  # 0 disables clipping
    schedule: str = "cosine"
    schedule_steps: int | None = None  # None = max_steps (or fewer, if max_tokens ends the run earlier)
    warmup_steps: int = 20
    min_lr_ratio: float = 0.1
    decay_fraction: float = 0.2  # wsd only: the final fraction of steps that decays
    # evaluation, logging, checkpoints
    eval_every: int = 100  # 0 = only at the end
    eval_batches: int = 20
    log_every: int = 10
    checkpoint_every: int = 0  # 0 = only at the end (and on Ctrl-C / time budget)
    keep_last: int = 3  # 0 = keep all
    resume: str | None = None  # "latest" or a checkpoint/run path
    progress: bool = True
    tensorboard: bool = False
    wandb: bool = False
    # the sample printed at the end
    sample_tokens: int = 120
    prompt: str = ""  # empty = the start of a new document (after an end-of-text token)
    temperature: float = 0.8
    top_k: int = 50

    def __post_init__(self) -> None:
        if isinstance(self.compile, bool):  # compile=True from Python callers means "on"
            self.compile = "on" if self.compile else "off"
        self.validate()

    def validate(self) -> None:
        def need(ok: bool, message: str) -> None:
            if not ok:
                raise TinyLMError(message)

        need(self.batch_size >= 1, f"--batch-size must be >= 1 (got {self.batch_size})")
        need(self.grad_accum >= 1, f"--grad-accum must be >= 1 (got {self.grad_accum})")
        need(self.seq_len is None or self.seq_len >= 2, f"--seq-len must be >= 2 (got {self.seq_len})")
        need(self.max_steps >= 1, f"--max-steps must be >= 1 (got {self.max_steps})")
        need(self.max_tokens is None or self.max_tokens >= 1, f"--max-tokens must be >= 1 (got {self.max_tokens})")
        need(self.time_budget is None or self.time_budget > 0, f"--time-budget must be > 0 (got {self.time_budget})")
        need(self.schedule_steps is None or self.schedule_steps >= 1, "--schedule-steps must be >= 1")
        need(self.lr > 0 and self.muon_lr > 0, "learning rates must be > 0")
        need(self.weight_decay >= 0, "--weight-decay must be >= 0")
        need(0 <= self.beta1 < 1 and 0 <= self.beta2 < 1, "--beta1 and --beta2 must be in [0, 1)")
        need(self.grad_clip >= 0, "--grad-clip must be >= 0 (0 disables it)")
        need(self.warmup_steps >= 0, "--warmup-steps must be >= 0")
        for name in ("eval_every", "checkpoint_every", "keep_last"):
            need(getattr(self, name) >= 0, f"--{name.replace('_', '-')} must be >= 0")
        need(self.eval_batches >= 1, "--eval-batches must be >= 1")
        need(self.log_every >= 1, "--log-every must be >= 1")
        need(self.sample_tokens >= 0, "--sample-tokens must be >= 0")
        need(self.threads is None or self.threads >= 1, "--threads must be >= 1")
        need(self.compile in ("auto", "on", "off"), f"--compile must be auto, on or off (got {self.compile!r})")
        need(self.attention in ("auto", "sdpa", "blockwise"),
             f"--attention must be auto, sdpa or blockwise (got {self.attention!r})")
        from tinylm.inference.sampling import check_sampling_options

        check_sampling_options(self.temperature, self.top_k)  # the end-of-run sample: refuse now, not after training

    def model_config(self) -> ModelConfig:
        """The preset for this arch with the overrides applied (validated)."""
        from tinylm.presets import preset_config

        known = {f.name for f in dataclasses.fields(ModelConfig)}
        unknown = sorted(set(self.overrides) - known)
        if unknown:
            raise TinyLMError(f"unknown model field(s) {', '.join(unknown)}")
        overrides = dict(self.overrides)
        if self.gradient_checkpointing:
            overrides["gradient_checkpointing"] = True
        return preset_config(self.preset, self.arch, **overrides)

    def replace(self, **changes: Any) -> TrainConfig:
        return dataclasses.replace(self, **changes)

    def to_dict(self) -> dict[str, Any]:
        return dataclasses.asdict(self)
