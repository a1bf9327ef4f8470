"""What a training stage gives the one engine: its model, its batches, its loss and its evaluation.

Pretraining, SFT, reward modelling, DPO and RL differ in what they read and what they minimise,
not in how a run is driven. So `train/loop.py` owns the run (schedule, accumulation, clipping, NaN
guard, budgets, checkpoints, exact resume, DDP/FSDP, metrics, progress, Ctrl-C) and a `Stage` owns
only what makes it that stage:

- `configure(start)` and `setup(ctx)`: the model config, then the data. The engine measures the run's
  choices (autocast dtype, attention kernel, compile) on the model config, once, so `setup` and every
  later call see a context whose choices are final. By default `configure` runs the whole `setup`
  early, on a context that has no choices yet (so it cannot read one before it is made);
- `build_model(resume)`: the model to train, on the CPU, with the weights it starts from (a fresh
  init, a base checkpoint, vocabulary growth, LoRA adapters...), and with `resume`'s weights loaded
  when a run continues;
- `next_batch()` with a resumable position (`state_dict` / `load_state_dict`);
- `loss(model, batch)`: a *sum* over the batch's units (target tokens, pairs, rollouts) and the
  number of units (`batch_weight`), so the engine can divide by the whole step's count over all
  micro-batches and ranks: accumulation and torchrun then equal one big batch exactly, even when
  micro-batches hold different numbers of targets;
- `begin_step(model, batches)` (optional): a look at all of a step's micro-batches before its first
  backward, for a statistic of the whole step that every micro-batch's loss then shares (KTO's
  reference point, stages/preference/kto_step.py); per-micro-batch statistics would break the equality above;
- `batch_tokens(batch)` (optional): the tokens a micro-batch's forward really processes, for tokens/s
  and MFU, when rows are cut shorter than the planned `seq_len` (rollouts, preference pairs);
- `evaluate(model)`: the numbers that say whether the stage works (dev loss, exact-match...), and
  `target_reached(evaluation)` (optional): the stage's own rule for stopping at a good enough one.

What is the stage's to say, the engine asks it: the default run folder's name (`run_name`), the header's
model label (`model_label`), the batch plan (`plan_batches`: pretraining's ramp and sequence warmup).
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Generic, TypeVar

import torch
from torch import nn

from tinylm.checkpoint import read_checkpoint_config
from tinylm.config import ModelConfig
from tinylm.runtime.distributed import DistEnv
from tinylm.runtime.run_choices import RunChoices
from tinylm.train.batch_plan import BatchPlan
from tinylm.train.config import EngineConfig

Batch = Any  # whatever the stage's loader yields; only the stage looks inside
ConfigT = TypeVar("ConfigT", bound=EngineConfig)  # the stage's own config type: PretrainConfig, SFTConfig...


@dataclass(frozen=True)
class StageStart(Generic[ConfigT]):
    """What the engine has decided before the stage says its model: where, on what, from which checkpoint."""

    cfg: ConfigT
    env: DistEnv
    device: torch.device
    run_dir: Path
    resume: Path | None  # the checkpoint this run continues (full train state), or None
    start_from: Path | None  # a weights-only checkpoint a fresh run starts from (e.g. `tinylm import`)
    say: Any  # a callable taking one line for the console (rank 0 only)


@dataclass(frozen=True)
class StageContext(StageStart[ConfigT]):
    """`StageStart` plus the run's choices, final: how the stage runs its forwards."""

    dtype: torch.dtype  # the autocast dtype (`choices.dtype` in a run)
    choices: RunChoices | None = None  # every choice with its reason; None where no engine made them (tests)
    plan: BatchPlan | None = None  # the run's step shapes, the one the loop counts tokens by (None in tests)

    @classmethod
    def final(cls, start: StageStart[ConfigT], choices: RunChoices, plan: BatchPlan) -> StageContext[ConfigT]:
        fields = {f.name: getattr(start, f.name) for f in dataclasses.fields(StageStart)}
        return cls(**fields, dtype=choices.dtype, choices=choices, plan=plan)


@dataclass
class StageLoss:
    """One micro-batch's summed loss and any summed metrics (divided by the step's weight when logged)."""

    total: torch.Tensor
    metrics: dict[str, torch.Tensor]


class Stage(Generic[ConfigT]):
    """The base every stage extends; the defaults are what most stages want.

    Generic in its config type: `class SFTStage(FromBaseStage[SFTConfig])` reads `self.ctx.cfg` as an
    SFTConfig, with no cast.
    """

    ctx: StageContext[ConfigT]

    name: str = "stage"
    # True when every micro-batch has the same weight (pretraining: batch x seq_len targets), which
    # saves one all-reduce per step
    constant_weight: bool = False
    # evaluate before the first step of a fresh run, so the log holds the starting point ("before")
    evaluate_at_start: bool = False
    # True when next_batch draws each step's rows by the run's batch plan (train/batch_plan.py: a batch-size
    # ramp, a sequence-length warmup); only such a stage may be given one
    follows_batch_plan: bool = False
    step: int = 0  # the optimizer step the micro-batches being drawn belong to (set by draw_step)

    def configure(self, start: StageStart[ConfigT]) -> ModelConfig:
        """The config of the model this stage trains, before its data: the run's choices are measured on it.

        The default sets the whole stage up now, on `start`, which has no choices (a `setup` that reads
        one fails loudly rather than see a value that changes later), and returns `model_config()`. A
        stage can give its model config here instead and leave its data to `setup`.
        """
        self.setup(start)  # type: ignore[arg-type]
        self._set_up_early = True
        return self.model_config()

    def enter(self, ctx: StageContext[ConfigT]) -> None:
        """The engine hands over the context with the run's final choices, once: `setup(ctx)` now, or only
        the context when the default `configure` has set the stage up already."""
        if getattr(self, "_set_up_early", False):
            self.ctx = ctx
        else:
            self.setup(ctx)

    def setup(self, ctx: StageContext[ConfigT]) -> None:
        """Find or build the data (after `configure`, or as all of it by default)."""
        self.ctx = ctx

    def run_name(self, cfg: ConfigT) -> str:
        """The default run folder runs/<name> when no --out is given (numbered past taken ones)."""
        return self.name

    def model_label(self) -> str:
        """What the header calls the model ("model: LABEL modern, 1,234 parameters")."""
        return self.name

    def plan_batches(self, cfg: ConfigT, seq_len: int, world_size: int) -> BatchPlan:
        """The run's step shapes (train/batch_plan.py), which the loop counts tokens by: every step alike unless
        the stage draws its rows by a plan of its own (`follows_batch_plan`: pretraining's ramp and warmup)."""
        return BatchPlan(cfg.batch_size, seq_len, cfg.grad_accum * world_size)

    def target_reached(self, evaluation: dict[str, float]) -> str | None:
        """Why this evaluation is good enough to stop the run ("an evaluation reached ..."), or None to go on.
        Every rank must answer alike: an evaluation's numbers are all-reduced."""
        return None

    def model_config(self) -> ModelConfig:
        """The ModelConfig of the model this stage trains (known after `configure`)."""
        raise NotImplementedError

    def build_model(self) -> nn.Module:
        """The model to train, on the CPU, initialised or loaded (resume included)."""
        raise NotImplementedError

    def draw_step(self, step: int, micro_batches: int) -> list[Batch]:
        """The micro-batches of optimizer step `step` (0-based, counted across resumes): `self.step` says which
        step `next_batch` draws for, to a stage whose batches change shape with it (pretraining's batch plan)."""
        self.step = step
        return [self.next_batch() for _ in range(micro_batches)]

    def next_batch(self) -> Batch:
        raise NotImplementedError

    def batch_weight(self, batch: Batch) -> int:
        """How many units `loss` sums over (the divisor of the step's mean)."""
        raise NotImplementedError

    def loss(self, model: nn.Module, batch: Batch) -> StageLoss:
        raise NotImplementedError

    def begin_step(self, model: nn.Module, batches: list[Batch]) -> None:
        """Called once per optimizer step with its micro-batches, before any of them runs `loss`; the raw
        (unwrapped) model. Collective under torchrun: every rank calls it, so it may all-reduce. Default: nothing."""

    def batch_tokens(self, batch: Batch) -> int | None:
        """Tokens the forward over `batch` processes (padding inside the rows included: it is computed).
        None: the planned batch_size x seq_len, right for stages whose rows are always full (pretraining, SFT)."""
        return None

    def evaluate(self, model: nn.Module) -> dict[str, float]:
        return {}

    def state_dict(self) -> dict[str, Any]:
        """The data position, saved in train_state.pt."""
        return {}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        pass

    def tokenizer_file(self) -> Path | None:
        return None

    def checkpoint_meta(self) -> dict[str, Any]:
        """Extra config.json fields (lineage, data spec, chat template)."""
        return {}

    def checkpoint_weights(self, model: nn.Module, gathered: dict[str, torch.Tensor] | None
                           ) -> dict[str, torch.Tensor] | None:
        """The weights a checkpoint stores (None = the whole model); LoRA stores only its adapters."""
        return gathered

    def describe(self) -> list[str]:
        """Lines for the run header."""
        return []

    def finish(self, model: nn.Module, checkpoint: Path | None) -> str | None:
        """Work at the end of a run on rank 0 (a sample, a merged copy), after the last checkpoint; text to print."""
        return None

    def keep_samples(self, samples: list[dict[str, Any]]) -> None:
        """Replies the model gave in an evaluation or a final sample ({"prompt", "reply", "verified"?}): the loop
        writes them to the run's samples.jsonl with the step, so a reader sees the answers change as it learns."""
        self._samples = samples

    def take_samples(self) -> list[dict[str, Any]]:
        """The samples kept since the last call, once."""
        taken, self._samples = getattr(self, "_samples", []), []
        return taken


def lineage(stage: str, resume: Path | None, started_from: Path | None, data: str, run_dir: Path
            ) -> list[dict[str, Any]]:
    """A checkpoint's lineage, oldest first: the starting checkpoint's own chain plus this stage's link
    (which stage wrote it, from which checkpoint, on which data), so a report can show base -> SFT -> ...
    A resumed run keeps the chain its checkpoint already has."""
    def chain_of(path: Path) -> list[dict[str, Any]]:
        links = read_checkpoint_config(path).get("lineage")
        return [link for link in links if isinstance(link, dict)] if isinstance(links, list) else []

    if resume is not None and chain_of(resume):
        return chain_of(resume)
    inherited = chain_of(started_from) if started_from is not None else []
    link = {"stage": stage, "from": str(started_from) if started_from else None, "data": data, "run": str(run_dir)}
    return [*inherited, link]
