"""EngineConfig: the options every training stage has, because the one engine (train/loop.py) reads them.

Where a run computes (device, dtype, threads, compile, attention kernel, FSDP), its batch and budgets, the
optimizer and the learning-rate schedule, the cadence of evaluations, logs and checkpoints, resume and the
trackers. What a stage trains on and how (pretraining's preset and sample, SFT's data and LoRA, RL's algorithm)
lives on the stage's own config, which extends this one: `stages/pretrain/config.py`, `stages/post_config.py`.
The command line maps one option to one field (`--max-steps` -> `max_steps`), so a config file, the CLI and
`run_training(SomeConfig(...))` all describe a run the same way.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from typing import Any, TypeVar

from tinylm.metrics import TENSORBOARD_IN_RUN
from tinylm.options import (
    BATCH_SIZE,
    COMPILE,
    DEVICE,
    DTYPE,
    PROGRESS,
    SEED,
    STEPS,
    THREADS,
    Option,
    check_options,
)
from tinylm.train.optim import OPTIMIZERS
from tinylm.train.schedule import SCHEDULES, WEIGHT_DECAY_SCHEDULES

# --lr steers every parameter under AdamW but only the embeddings, head and norms beside Muon, which the record
# table (docs/speedrun.md) measured best ~20x higher; so its default follows --optimizer
DEFAULT_LR: dict[str, float] = {"adamw": 3e-3, "muon": 0.06}
# an AdamW or Muon step moves each weight by about lr: above this the first step already gives a NaN loss
LR_LIMIT, LR_REASON = 10.0, "an lr above 10 diverges at the first step; more is a typo"

# Measured on 2 CPU cores (torch 2.13): tiny modern trains at ~14.7k tokens/s at batch 16 x 256 (0.28 s
# per step), so 600 steps (2.5M tokens, ~0.7 epoch of pystdlib) take ~2.8 minutes; data preparation
# (~4 s), startup, evals and the sample bring `make demo` to ~3 minutes, with headroom for slower CPUs.
DEMO_STEPS = 600

# the --help sections of every training command
MODEL_AND_DATA, HARDWARE, BUDGET = "model and data", "hardware", "batch and budget"
OPTIMIZER, LOGGING = "optimizer and schedule", "evaluation, logging, checkpoints"
RESUME = Option("continue from a checkpoint: latest (this run folder's newest) or a checkpoint/run path; the run's "
                "own options are taken for every option not given", metavar="latest|PATH", group=LOGGING,
                per_invocation=True)

Self = TypeVar("Self", bound="EngineConfig")


@dataclass
class EngineConfig:
    """What the engine reads, whichever stage it runs; a stage's config adds its own fields."""

    out: str | None = Option("run folder (default runs/<preset>-<arch>, or runs/<base run>-<stage>; a fresh "
                             "suffix if it is taken)", metavar="DIR", group=MODEL_AND_DATA,
                             per_invocation=True)(None)
    seed: int = SEED(1337, group=MODEL_AND_DATA)
    # where and how
    device: str = DEVICE("auto", group=HARDWARE)
    dtype: str = DTYPE("auto", group=HARDWARE, note="autocast: fp32 master weights either way")
    threads: int | None = THREADS(None, group=HARDWARE)
    compile: str = COMPILE("auto", group=HARDWARE, note="of each block, where the measured compile time pays back")
    attention: str = Option("causal attention kernel; auto = blockwise query products on a CPU where the model's "
                            "attention layer measures faster with them than with SDPA (the reason is printed)",
                            choices=("auto", "sdpa", "blockwise"), group=HARDWARE)("auto")
    gradient_checkpointing: bool = Option("recompute activations in backward", group=HARDWARE)(False)
    fsdp: bool = Option("shard the model with FSDP2 (under torchrun)", group=HARDWARE)(False)
    dist_timeout: float | None = Option("under torchrun: seconds a rank waits for the others in a collective before "
                                        "the run fails, naming the ranks that gave no answer (default: torch's, "
                                        "30 min for gloo, 10 for NCCL); setup waits count too", low=0,
                                        low_open=True, metavar="SECONDS", group=HARDWARE)(None)
    # batch
    batch_size: int = BATCH_SIZE(16, group=BUDGET, note="training: per micro-batch (RL: prompts)")
    grad_accum: int = Option("micro-batches per optimizer step", low=1, group=BUDGET)(1)
    seq_len: int | None = Option("tokens per row (default: the context length)", low=2, group=BUDGET)(None)
    # budgets (the first one reached stops the run)
    max_steps: int = Option("total optimizer steps, counted across resumes", low=1, high=STEPS.high,
                            reason=STEPS.reason, group=BUDGET)(DEMO_STEPS)
    max_tokens: int | None = Option("stop after this many training tokens", low=1, group=BUDGET)(None)
    time_budget: float | None = Option("stop (and save) before this many seconds of training (predicted from the "
                                       "last step), counted across resumes; the lr schedule is planned against "
                                       "them too, so its decay happens inside the budget", low=0, low_open=True,
                                       metavar="SECONDS", group=BUDGET)(None)
    # optimizer and schedule
    optimizer: str = Option("muon for the hidden matrices (AdamW for embeddings, head and norms), or adamw for all",
                            choices=OPTIMIZERS, group=OPTIMIZER)("muon")
    lr: float | None = Option("AdamW learning rate: of every parameter with --optimizer adamw, of the embeddings, "
                              f"head and norms beside Muon (default: {DEFAULT_LR['adamw']:g} with adamw, "
                              f"{DEFAULT_LR['muon']:g} with muon)", low=0, low_open=True, high=LR_LIMIT,
                              reason=LR_REASON, group=OPTIMIZER)(None)
    weight_decay: float = Option("decoupled weight decay of the matrices", low=0, group=OPTIMIZER)(0.1)
    weight_decay_schedule: str = Option("constant: the coefficient stays --weight-decay (each step still decays "
                                        "by lr x coefficient, so it follows the lr schedule); linear: the "
                                        "coefficient itself falls to 0 at the schedule's end",
                                        choices=WEIGHT_DECAY_SCHEDULES, group=OPTIMIZER)("constant")
    beta1: float = Option("AdamW beta1", low=0, high=1, high_open=True, group=OPTIMIZER)(0.9)
    beta2: float = Option("AdamW beta2", low=0, high=1, high_open=True, group=OPTIMIZER)(0.95)
    muon_lr: float = Option("Muon learning rate", low=0, low_open=True, high=LR_LIMIT, reason=LR_REASON,
                            group=OPTIMIZER)(0.02)
    muon_momentum: float = Option("Muon momentum", low=0, high=1, group=OPTIMIZER)(0.9)
    grad_clip: float = Option("max gradient norm; 0 = off", low=0, group=OPTIMIZER)(1.0)
    schedule: str = Option("learning-rate schedule", choices=SCHEDULES, group=OPTIMIZER)("cosine")
    schedule_steps: int | None = Option("length of the lr schedule (default: --max-steps)", low=1,
                                        group=OPTIMIZER)(None)
    warmup_steps: int = Option("linear warmup steps", low=0, group=OPTIMIZER)(20)
    min_lr_ratio: float = Option("the schedule's final lr as a share of --lr", low=0, high=1, group=OPTIMIZER)(0.1)
    decay_fraction: float = Option("wsd: final decay share", low=0, high=1, group=OPTIMIZER)(0.2)
    # evaluation, logging, checkpoints
    eval_every: int = Option("steps between evaluations; 0 = only at the end", low=0, group=LOGGING)(100)
    log_every: int = Option("steps between log lines", low=1, group=LOGGING)(10)
    checkpoint_every: int = Option("steps between checkpoints; 0 = only at the end (and on Ctrl-C / time budget)",
                                   low=0, group=LOGGING)(0)
    keep_last: int = Option("checkpoints to keep; 0 = all", low=0, group=LOGGING)(3)
    snapshot_every: int = Option("steps between weights-only snapshots in RUN/snapshots (never pruned, not "
                                 "resumable: what `tinylm inspect induction` reads); 0 = none", low=0,
                                 group=LOGGING)(0)
    resume: str | None = RESUME(None)
    progress: bool = PROGRESS(True, group=LOGGING)
    tensorboard: str | None = Option(
        "also log every metrics row to TensorBoard, event files in DIR (one run per DIR; bare --tensorboard: "
        "RUN/tensorboard); needs the tensorboard package", metavar="DIR", const=TENSORBOARD_IN_RUN,
        group=LOGGING)(None)
    wandb: bool = Option("also log every metrics row to Weights & Biases: an offline run in RUN/wandb, no login or "
                         "network (upload it later with `wandb sync`), unless WANDB_MODE is set, which then decides; "
                         "needs the wandb package", group=LOGGING)(False)
    def __post_init__(self) -> None:
        if isinstance(self.compile, bool):  # compile=True from Python callers means "on"
            self.compile = "on" if self.compile else "off"
        # --tensorboard was an on/off flag: True (Python, a pipeline table) or "true" (a config file's `tensorboard =
        # true`, which reaches the flag as text) still means the run folder's, and False / "false" off
        if self.tensorboard is True or self.tensorboard == "true":
            self.tensorboard = TENSORBOARD_IN_RUN
        elif self.tensorboard is False or self.tensorboard == "false":
            self.tensorboard = None
        self.validate()

    def validate(self) -> None:
        """Each option's own range and choices, then what no single option can say."""
        check_options(self)

    def unset_value(self, name: str, default: Any) -> Any:
        """What option `name` holds when it is not given: its declared default, unless the config fills it in
        from other options (pretraining's batch from --depth), so a resume still knows it was not given."""
        return default

    @property
    def adamw_lr(self) -> float:
        """--lr, or its default for this --optimizer."""
        return self.lr if self.lr is not None else DEFAULT_LR[self.optimizer]

    def replace(self: Self, **changes: Any) -> Self:
        return dataclasses.replace(self, **changes)

    def start_problem(self) -> str | None:
        """Why this config cannot start a fresh run (a resume found no checkpoint to continue), or None: a stage
        that needs a checkpoint to start from says so here."""
        return None

    def to_dict(self) -> dict[str, Any]:
        return dataclasses.asdict(self)
