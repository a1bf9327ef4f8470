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

from dataclasses import dataclass

from tinylm.stages.post_config import PostTrainConfig
from tinylm.stages.preference.config import DPOConfig, RewardConfig
from tinylm.stages.preference.dpo import DPOStage
from tinylm.stages.preference.losses import LOSSES
from tinylm.stages.preference.reward import RewardStage
from tinylm.stages.pretrain.stage import PretrainStage
from tinylm.stages.rl.algorithms import algorithms
from tinylm.stages.rl.config import RLConfig
from tinylm.stages.rl.stage import RLStage
from tinylm.stages.sft.config import SFTConfig
from tinylm.stages.sft.stage import SFTStage
from tinylm.train.config import TrainConfig
from tinylm.train.stage import Stage

Scores = tuple[tuple[str, str, str], ...]  # (metric key, label, format) shown as "label before -> after"


@dataclass(frozen=True)
class StageSpec:
    """One row of the table."""

    name: str
    help: str
    config: type[TrainConfig]
    stage: type[Stage]
    learns_from: str = "data"  # the config field naming what it learns from; the pipeline wires it
    scores: Scores = ()  # the scores its closing line shows before -> after
    plots: tuple[str, ...] = ("loss.png",)  # the run folder's plots its closing lines point at

    @property
    def starts_from_base(self) -> bool:
        return issubclass(self.config, PostTrainConfig)

    def default_config(self) -> TrainConfig:
        """The defaults, as a form or --help shows them (a stage that needs --base gets a placeholder)."""
        return self.config(**({"base": "-"} if self.starts_from_base else {}))


_PAIR_SCORES: Scores = (("dev_accuracy", "held-out preference accuracy", "{:.1%}"),
                        ("dev_margin", "mean margin", "{:.3f}"))
_EXACT = ("exact_match", "held-out exact-match", "{:.1%}")

STAGES: dict[str, StageSpec] = {spec.name: spec for spec in (
    StageSpec("pretrain", "pretrain a model (no arguments: the demo on the embedded corpus)", TrainConfig,
              PretrainStage),
    StageSpec("sft", "supervised fine-tuning on conversations (built-in tasks, JSONL, hf:), optionally with LoRA",
              SFTConfig, SFTStage, scores=(("dev_loss", "dev loss (assistant tokens)", "{:.4f}"), _EXACT)),
    StageSpec("reward", "train a reward model on preference pairs (Bradley-Terry on a scalar head)", RewardConfig,
              RewardStage, scores=_PAIR_SCORES),
    StageSpec("dpo", f"preference tuning on pairs: --loss {'|'.join(LOSSES)}", DPOConfig, DPOStage,
              scores=(*_PAIR_SCORES, ("dev_logp_accuracy", "chosen likelier", "{:.1%}"), _EXACT)),
    StageSpec("rl", f"RL from verifiable rewards: --algo {'|'.join(algorithms())}", RLConfig, RLStage,
              learns_from="task", scores=(_EXACT,), plots=("rl.png", "loss.png")),
)}

# the command that runs each stage: `tinylm train` is pretraining, the others are the stage's own name
COMMAND_OF: dict[str, str] = {"pretrain": "train"}


def stage_of_command(command: str) -> StageSpec | None:
    """The stage `tinylm COMMAND` runs, or None for a command that trains nothing."""
    name = next((stage for stage, cmd in COMMAND_OF.items() if cmd == command), command)
    return STAGES.get(name)


def command_of(stage: str) -> str:
    return COMMAND_OF.get(stage, stage)
