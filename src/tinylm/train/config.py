"""TrainConfig: every knob of a training run in one dataclass, shared by `tinylm train` and Python callers.

The command line maps one option to one field (`--max-steps` -> `max_steps`), so a config file, the
CLI and `run_training(TrainConfig(...))` (what `tinylm compare` uses) all describe a run the same way.
The defaults are the `make demo` run: the `tiny` modern preset on the embedded Python-stdlib corpus,
sized to finish in about five minutes on two CPU cores, data preparation included.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from typing import Any

from tinylm.config import ModelConfig, parse_override
from tinylm.errors import TinyLMError
from tinylm.inference.sampling import check_sampling_options
from tinylm.metrics import TENSORBOARD_IN_RUN
from tinylm.options import (
    BATCH_SIZE,
    DEVICE,
    DTYPE,
    PROGRESS,
    SEED,
    TEMPERATURE,
    THREADS,
    TOP_K,
    Option,
    check_options,
)
from tinylm.presets import PRESETS, preset_config
from tinylm.train.batch_plan import check_quarters
from tinylm.train.optim import OPTIMIZERS
from tinylm.train.schedule import SCHEDULES, WEIGHT_DECAY_SCHEDULES

# --lr steers every parameter under AdamW but only the embeddings, head and norms beside Muon, which the record
# table (docs/speedrun.md) measured best ~20x higher; so its default follows --optimizer
DEFAULT_LR: dict[str, float] = {"adamw": 3e-3, "muon": 0.06}
# the record's sequence-length warmup: 150 steps of a 600-step run; unset, it is at most a quarter of the schedule
DEFAULT_SEQ_WARMUP_STEPS = 150

# Measured on 2 CPU cores (torch 2.13): tiny modern trains at ~14.7k tokens/s at batch 16 x 256 (0.28 s
# per step), so 600 steps (2.5M tokens, ~0.7 epoch of pystdlib) take ~2.8 minutes; data preparation
# (~4 s), startup, evals and the sample bring `make demo` to ~3 minutes, with headroom for slower CPUs.
DEMO_STEPS = 600


# pretraining's own options, which a stage that starts from a trained model (SFT, DPO, RL) does not take
PRETRAINING_ONLY: tuple[str, ...] = ("preset", "arch", "overrides", "prompt", "sample_tokens", "eval_batch_size",
                                     "target_dev_bpb", "z_loss", "batch_ramp_steps", "seq_len_warmup_steps")

# the --help sections of every training command
MODEL_AND_DATA, HARDWARE, BUDGET = "model and data", "hardware", "batch and budget"
OPTIMIZER, LOGGING, SAMPLE = "optimizer and schedule", "evaluation, logging, checkpoints", "sample at the end"
RESUME = Option("continue from a checkpoint: latest (this run folder's newest) or a checkpoint/run path",
                metavar="latest|PATH", group=LOGGING)


@dataclass
class TrainConfig:
    """The engine's options (every training stage has them) and pretraining's own (the model, data and sample)."""

    # what to train
    preset: str = Option("model size", choices=lambda: tuple(PRESETS), strict_choices=False,
                         group=MODEL_AND_DATA)("tiny")
    arch: str = Option("the GPT-2-style classic or the modern (Llama/Qwen-style) decoder",
                       choices=("modern", "classic"), group=MODEL_AND_DATA)("modern")
    overrides: dict[str, Any] = Option(
        "override a model field, e.g. --set n_kv_head=1 (repeatable; in a config file: set = [\"n_kv_head=1\"] or "
        "a [set] table)", flag="--set", metavar="FIELD=VALUE", items=True, parse_item=parse_override,
        group=MODEL_AND_DATA)(default_factory=dict)
    data: str | None = Option("prepared data folder (default: the pystdlib corpus, prepared on first use)",
                              metavar="DIR", group=MODEL_AND_DATA)(None)
    out: str | None = Option("run folder (default runs/<preset>-<arch>, or runs/<base run>-<stage>; a fresh "
                             "suffix if it is taken)", metavar="DIR", group=MODEL_AND_DATA)(None)
    seed: int = SEED(1337, group=MODEL_AND_DATA)
    # where and how
    device: str = DEVICE("auto", group=HARDWARE)
    dtype: str = DTYPE("auto", group=HARDWARE, note="autocast: fp32 master weights either way")
    threads: int | None = THREADS(None, group=HARDWARE)
    compile: str = Option("torch.compile each block; auto = only when the measured compile time pays back "
                          "(bare --compile = on)", choices=("auto", "on", "off"), const="on", group=HARDWARE)("auto")
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
    batch_ramp_steps: int = Option("pretraining: a batch-size ramp, a quarter of --batch-size for the first half of "
                                   "N steps and half for the second, then all of it (a token budget then takes "
                                   "more steps); 0 = off", low=0, metavar="N", group=BUDGET)(0)
    seq_len_warmup_steps: int | None = Option(
        "pretraining: a sequence-length warmup, rows a quarter as long (and 4x as many) for the first half of N "
        "steps and half as long for the second; the tokens per step stay the same; 0 = off (default: "
        f"{DEFAULT_SEQ_WARMUP_STEPS}, at most a quarter of the lr schedule, none where rows cannot be quartered)",
        low=0, metavar="N", group=BUDGET)(None)
    # budgets (the first one reached stops the run)
    max_steps: int = Option("total optimizer steps, counted across resumes", low=1, group=BUDGET)(DEMO_STEPS)
    max_tokens: int | None = Option("stop after this many training tokens", low=1, group=BUDGET)(None)
    time_budget: float | None = Option("stop (and save) before this many seconds of training (predicted from the "
                                       "last step), counted across resumes; the lr schedule is planned against "
                                       "them too, so its decay happens inside the budget", low=0, low_open=True,
                                       metavar="SECONDS", group=BUDGET)(None)
    target_dev_bpb: float | None = Option("stop at the first evaluation whose dev bits per byte is at or below X "
                                          "(pretraining; a resumed run checks at its next evaluation)", low=0,
                                          low_open=True, metavar="X", group=BUDGET)(None)
    # optimizer and schedule
    optimizer: str = Option("muon for the hidden matrices (AdamW for embeddings, head and norms), or adamw for all",
                            choices=OPTIMIZERS, group=OPTIMIZER)("muon")
    lr: float | None = Option("AdamW learning rate: of every parameter with --optimizer adamw, of the embeddings, "
                              f"head and norms beside Muon (default: {DEFAULT_LR['adamw']:g} with adamw, "
                              f"{DEFAULT_LR['muon']:g} with muon)", low=0, low_open=True, group=OPTIMIZER)(None)
    weight_decay: float = Option("decoupled weight decay of the matrices", low=0, group=OPTIMIZER)(0.1)
    weight_decay_schedule: str = Option("constant: the coefficient stays --weight-decay (each step still decays "
                                        "by lr x coefficient, so it follows the lr schedule); linear: the "
                                        "coefficient itself falls to 0 at the schedule's end",
                                        choices=WEIGHT_DECAY_SCHEDULES, group=OPTIMIZER)("constant")
    beta1: float = Option("AdamW beta1", low=0, high=1, high_open=True, group=OPTIMIZER)(0.9)
    beta2: float = Option("AdamW beta2", low=0, high=1, high_open=True, group=OPTIMIZER)(0.95)
    muon_lr: float = Option("Muon learning rate", low=0, low_open=True, group=OPTIMIZER)(0.02)
    muon_momentum: float = Option("Muon momentum", low=0, high=1, group=OPTIMIZER)(0.9)
    grad_clip: float = Option("max gradient norm; 0 = off", low=0, group=OPTIMIZER)(1.0)
    z_loss: float = Option("pretraining: each token's loss gains Z * logsumexp(logits)^2 (PaLM's z-loss), which keeps "
                           "the softmax normaliser near 1; the logged loss includes it, dev loss and bits per byte "
                           "do not; 0 = off", low=0, metavar="Z", group=OPTIMIZER)(0.0)
    schedule: str = Option("learning-rate schedule", choices=SCHEDULES, group=OPTIMIZER)("cosine")
    schedule_steps: int | None = Option("length of the lr schedule (default: --max-steps)", low=1,
                                        group=OPTIMIZER)(None)
    warmup_steps: int = Option("linear warmup steps", low=0, group=OPTIMIZER)(20)
    min_lr_ratio: float = Option("the schedule's final lr as a share of --lr", low=0, high=1, group=OPTIMIZER)(0.1)
    decay_fraction: float = Option("wsd: final decay share", low=0, high=1, group=OPTIMIZER)(0.2)
    # evaluation, logging, checkpoints
    eval_every: int = Option("steps between evaluations; 0 = only at the end", low=0, group=LOGGING)(100)
    eval_batches: int = Option("dev batches per evaluation", low=1, group=LOGGING)(20)
    eval_batch_size: int | None = Option("rows per dev batch (default: --batch-size); runs with different batches "
                                         "given one value are scored on the same dev rows", low=1,
                                         group=LOGGING)(None)
    log_every: int = Option("steps between log lines", low=1, group=LOGGING)(10)
    checkpoint_every: int = Option("steps between checkpoints; 0 = only at the end (and on Ctrl-C / time budget)",
                                   low=0, group=LOGGING)(0)
    keep_last: int = Option("checkpoints to keep; 0 = all", low=0, group=LOGGING)(3)
    resume: str | None = RESUME(None)
    progress: bool = PROGRESS(True, group=LOGGING)
    tensorboard: str | None = Option(
        "also log every metrics row to TensorBoard, event files in DIR (one run per DIR; bare --tensorboard: "
        "RUN/tensorboard); needs the tensorboard package", metavar="DIR", const=TENSORBOARD_IN_RUN,
        group=LOGGING)(None)
    wandb: bool = Option("also log every metrics row to Weights & Biases: an offline run in RUN/wandb, no login or "
                         "network (upload it later with `wandb sync`), unless WANDB_MODE is set, which then decides; "
                         "needs the wandb package", group=LOGGING)(False)
    # the sample printed at the end
    sample_tokens: int = Option("tokens of the sample printed at the end; 0 = no sample", low=0, group=SAMPLE)(120)
    prompt: str = Option("text to continue (default: a new document)", group=SAMPLE)("")
    temperature: float = TEMPERATURE(0.8, group=SAMPLE)
    top_k: int = TOP_K(50, group=SAMPLE)

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
        check_sampling_options(self.temperature, self.top_k)  # the end-of-run sample: refuse now, not after training
        check_options(self)
        # before a run folder exists
        check_quarters(self.batch_size, self.seq_len, self.batch_ramp_steps, self.seq_len_warmup_steps or 0)

    @property
    def adamw_lr(self) -> float:
        """--lr, or its default for this --optimizer."""
        return self.lr if self.lr is not None else DEFAULT_LR[self.optimizer]

    def model_config(self) -> ModelConfig:
        """The preset for this arch with the overrides applied (validated)."""
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
