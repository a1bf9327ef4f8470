"""The stage table: every stage that plugs into the one training engine, in the order of the road.

Each row names a stage's config (its options, declared once on the fields), its stage class (data, loss,
evaluation), its one-line help, and what the road wires into it. The command line (`tinylm NAME`), the
pipeline and the studio all read this table and nothing else: adding a stage is one row here, plus its
package (stages/NAME/: config.py and stage.py) and, if it wants examples in its --help, a
cli/commands/NAME.py.

A stage package may import train, evaluate, inference, models, tasks, data, tokenizer, checkpoint and
runtime; never cli or pipeline (which read this table), and no stage imports another stage's package
except through what they share (from_base.py, post_config.py).
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable
from dataclasses import dataclass, field

from tinylm.stages.distill.config import DistillConfig
from tinylm.stages.distill.stage import DistillStage
from tinylm.stages.post_config import FromBaseConfig
from tinylm.stages.preference.config import DPOConfig, RewardConfig
from tinylm.stages.preference.dpo import DPOStage
from tinylm.stages.preference.losses import LOSSES
from tinylm.stages.preference.preview import pair_preview
from tinylm.stages.preference.reward import RewardStage
from tinylm.stages.pretrain.config import PretrainConfig
from tinylm.stages.pretrain.preview import text_preview
from tinylm.stages.pretrain.stage import PretrainStage
from tinylm.stages.preview_rows import DataPreview
from tinylm.stages.rl.algorithms import algorithms
from tinylm.stages.rl.config import RLConfig
from tinylm.stages.rl.preview import prompt_preview
from tinylm.stages.rl.stage import RLStage
from tinylm.stages.sft.config import SFTConfig
from tinylm.stages.sft.preview import conversation_preview
from tinylm.stages.sft.stage import SFTStage
from tinylm.tokenizer.tokenizer import Tokenizer
from tinylm.train.config import EngineConfig
from tinylm.train.stage import Stage

Scores = tuple[tuple[str, str, str], ...]  # (metric key, label, format) shown as "label before -> after"
Curves = dict[str, tuple[str, ...]]  # report-card figure -> the metric keys drawn in it, when the run logged them
# (data spec, the base run's tokenizer or None, rows, seed) -> the first rows as the stage renders them
Preview = Callable[[str, Tokenizer | None, int, int], DataPreview]

CURVES: Curves = {
    "loss": ("loss", "dev_loss"),
    "reward": ("reward", "accuracy", "reward_chosen", "reward_rejected", "reward_margin", "reward_accuracy"),
    "evaluation": ("exact_match", "dev_bpb", "dev_accuracy", "dev_margin"),
}
# RL optimises the reward, so it leads, with the held-out exact-match. Its policy loss is left out: GRPO's is 0 by
# construction (advantages centred per group) and every surrogate's value says nothing of progress. PPO's value
# loss is a regression that does fall, so it stays, last.
RL_CURVES: Curves = {
    "reward": ("reward", "accuracy"),
    "evaluation": ("exact_match",),
    "value_loss": ("value_loss",),
}


@dataclass(frozen=True)
class StageSpec:
    """One row of the table."""

    name: str
    help: str
    config: type[EngineConfig]
    stage: type[Stage]
    command: str = ""  # `tinylm COMMAND` (default: the name)
    scores: Scores = ()  # the scores its closing line shows before -> after
    plots: tuple[str, ...] = ("loss.png",)  # the run folder's plots its closing lines point at
    curves: Curves = field(default_factory=lambda: dict(CURVES))  # the figures of its runs' report cards
    preview: Preview | None = None  # what the studio's data page shows of a spec before a run (None: nothing)
    road_slot: str | None = None  # its slot on `tinylm pipeline`'s road (its [table] and folder), None: not on it

    def __post_init__(self) -> None:
        if not self.command:
            object.__setattr__(self, "command", self.name)

    @property
    def starts_from_base(self) -> bool:
        return issubclass(self.config, FromBaseConfig)

    @property
    def learns_from(self) -> str:
        """The config field naming what it learns from (the pipeline wires it; the lineage records it)."""
        return getattr(self.stage, "learns_from", "data")

    @property
    def road_inputs(self) -> dict[str, str]:
        """Config field -> what the pipeline wires into it: "task", or an earlier slot whose run it names. Empty: the
        usual wiring (a base stage starts from the slot before it and learns the task; pretraining reads the data)."""
        return dict(getattr(self.stage, "road_inputs", {}))

    @property
    def road_optional(self) -> bool:
        """A slot the road runs only when the pipeline's `stages` names it (distillation: after GRPO)."""
        return bool(getattr(self.stage, "road_optional", False))

    @property
    def metric_notes(self) -> dict[str, tuple[str, str]]:
        """Metric -> (unit, one line) for the metrics only this stage logs (the studio's chart notes)."""
        return dict(getattr(self.stage, "metric_notes", {}))

    @property
    def pins_dtype(self) -> bool:
        """Its config fixes a dtype of its own (RL: the sampler's and the trainer's log-probs agree in fp32), which
        a setting shared by several stages (the pipeline's dtype) leaves alone."""
        return next(f.default for f in dataclasses.fields(self.config) if f.name == "dtype") != "auto"

    def default_config(self) -> EngineConfig:
        """The defaults, as a form or --help shows them (a stage that needs --base gets a placeholder)."""
        return self.config(**({"base": "-"} if self.starts_from_base else {}))


_PAIR_SCORES: Scores = (("dev_accuracy", "held-out preference accuracy", "{:.1%}"),
                        ("dev_margin", "mean margin", "{:.3f}"))
_EXACT = ("exact_match", "held-out exact-match", "{:.1%}")

STAGES: dict[str, StageSpec] = {spec.name: spec for spec in (
    StageSpec("pretrain", "pretrain a model (no arguments: the demo on the embedded corpus)", PretrainConfig,
              PretrainStage, command="train", preview=text_preview, road_slot="pretrain"),
    StageSpec("sft", "supervised fine-tuning on conversations (built-in tasks, JSONL, hf:), optionally with LoRA",
              SFTConfig, SFTStage, scores=(("dev_loss", "dev loss (assistant tokens)", "{:.4f}"), _EXACT),
              preview=conversation_preview, road_slot="sft"),
    StageSpec("reward", "train a reward model on preference pairs (Bradley-Terry on a scalar head)", RewardConfig,
              RewardStage, scores=_PAIR_SCORES, preview=pair_preview),
    StageSpec("dpo", f"preference tuning on pairs: --loss {'|'.join(LOSSES)}", DPOConfig, DPOStage,
              scores=(*_PAIR_SCORES, ("dev_logp_accuracy", "chosen likelier", "{:.1%}"), _EXACT),
              preview=pair_preview, road_slot="dpo"),
    StageSpec("rl", f"RL from verifiable rewards: --algo {'|'.join(algorithms())}", RLConfig, RLStage,
              scores=(_EXACT,), plots=("rl.png", "loss.png"), curves=RL_CURVES,
              preview=prompt_preview, road_slot="grpo"),
    StageSpec("distill", "learn from a teacher's next-token distributions: --divergence forward_kl|reverse_kl|jsd, "
              "a logit cache, sequence-level, on-policy (GKD)", DistillConfig, DistillStage,
              scores=(("dev_divergence", "held-out divergence to the teacher", "{:.4f}"),
                      ("dev_agreement", "top-1 agreement", "{:.1%}"),
                      ("dev_bpb", "held-out bits per byte", "{:.4f}"), _EXACT),
              curves={"loss": ("loss", "dev_loss"), "divergence": ("divergence", "dev_divergence"),
                      "agreement": ("agreement", "dev_agreement"), "evaluation": ("exact_match", "dev_bpb")},
              road_slot="distill"),
)}


def stage_of_command(command: str) -> StageSpec | None:
    """The stage `tinylm COMMAND` runs, or None for a command that trains nothing."""
    return next((spec for spec in STAGES.values() if spec.command == command), None)


def command_of(stage: str) -> str:
    return STAGES[stage].command


def report_curves(stage: str | None) -> Curves:
    """The report card's figures for a run of `stage` (the generic ones for a stage the table does not know)."""
    return STAGES[stage].curves if stage in STAGES else dict(CURVES)
