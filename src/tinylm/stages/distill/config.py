"""DistillConfig: what `tinylm distill` can be told: the teacher, the student, the data, the divergence and how
it mixes with the cross-entropy, on-policy batches, the logit cache and sequence-level distillation.

The defaults distil into a fresh `tiny` student on the teacher's own pretraining data with the forward KL
at temperature 1, half and half with the ordinary cross-entropy, with pretraining's engine defaults
(Muon, cosine schedule) since a fresh student is pretraining.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from typing import Any

from tinylm.config import ModelConfig
from tinylm.errors import TinyLMError
from tinylm.options import MAX_NEW_TOKENS, TEACHER, TEMPERATURE, TOP_K, Option, option_from
from tinylm.presets import preset_config
from tinylm.stages.distill.divergences import DIVERGENCES
from tinylm.stages.post_config import FromBaseConfig
from tinylm.stages.pretrain.config import PretrainConfig  # a fresh student is shaped as pretraining shapes one
from tinylm.tasks.registry import builtin_specs
from tinylm.train.config import MODEL_AND_DATA, EngineConfig

TEACHER_AND_STUDENT, LOSS, ON_POLICY = "teacher and student", "the loss", "on-policy and sequence-level"
# the shared flags, meaning here what they mean to distillation
DISTILL_TEMPERATURE = dataclasses.replace(TEMPERATURE, help="both distributions are softmax(logits / T), T > 0",
                                          low=0, low_open=True)
TEACHER_TOP_K = dataclasses.replace(TOP_K, help="the divergence on the teacher's K most likely tokens only, both "
                                    "sides renormalised (default: the whole vocabulary; a logit cache keeps K, "
                                    "default 32)")


@dataclass
class DistillConfig(EngineConfig):
    """The engine's options plus distillation's own."""

    teacher: str | None = TEACHER(None, group=TEACHER_AND_STUDENT, note="not needed when --logit-cache holds its "
                                  "logits")
    preset: str = option_from(PretrainConfig, "preset", note="of a fresh student", group=TEACHER_AND_STUDENT)
    arch: str = option_from(PretrainConfig, "arch", group=TEACHER_AND_STUDENT)
    overrides: dict[str, Any] = option_from(PretrainConfig, "overrides", note="of a fresh student; its vocabulary is "
                                            "the teacher's", group=TEACHER_AND_STUDENT)
    base: str | None = option_from(FromBaseConfig, "base", None, note="here: the student, a fresh --preset when not "
                                   "given", group=TEACHER_AND_STUDENT)
    data: str | None = Option("a prepared data folder (text), or conversations: a task (" +
                              ", ".join(builtin_specs()) + "), FILE.jsonl or hf:NAME (default: the teacher's "
                              "pretraining data)", metavar="SPEC", group=MODEL_AND_DATA)(None)
    train_rows: int | None = Option("text: use the first N rows of the training shard (default: all)", low=1,
                                    metavar="N", group=MODEL_AND_DATA)(None)
    train_examples: int = Option("problems generated for a built-in task", low=1, group=MODEL_AND_DATA)(20_000)
    eval_examples: int = Option("held-out problems of a built-in task (held-out divergence and exact-match)", low=1,
                                group=MODEL_AND_DATA)(200)
    dev_fraction: float = Option("share of a file's conversations held out", low=0, high=1, low_open=True,
                                 high_open=True, group=MODEL_AND_DATA)(0.05)
    eval_batches: int = Option("text: held-out batches per evaluation", low=1, group=MODEL_AND_DATA)(10)
    divergence: str = Option("forward_kl = KL(teacher || student), mode-covering; reverse_kl = KL(student || "
                             "teacher), mode-seeking; jsd = generalized JSD with --beta", choices=DIVERGENCES,
                             group=LOSS)("forward_kl")
    beta: float = Option("jsd's weight, TRL's convention: 0 = forward KL(teacher || student), 1 = reverse "
                         "KL(student || teacher), taken exactly at the ends", low=0, high=1, group=LOSS)(0.5)
    temperature: float = DISTILL_TEMPERATURE(1.0, group=LOSS)
    top_k: int | None = TEACHER_TOP_K(None, group=LOSS)
    ce_weight: float = Option("each trained token's loss is (1 - W) x divergence + W x cross-entropy on the data's "
                              "token (on-policy tokens have no data token: divergence alone)", low=0, high=1,
                              metavar="W", group=LOSS)(0.5)
    logit_cache: str | None = Option("the teacher's top-K logits on the data, written here on first use and read "
                                     "(without loading the teacher) ever after", metavar="DIR", group=LOSS)(None)
    on_policy: float = Option("lambda: the share of micro-batches the student samples itself and the teacher "
                              "scores (GKD); 0 = all from the data, 1 = all on-policy", low=0, high=1,
                              metavar="LAMBDA", group=ON_POLICY)(0.0)
    max_new_tokens: int = dataclasses.replace(MAX_NEW_TOKENS, low=1)(
        32, group=ON_POLICY, note="of an on-policy sample, a teacher's answer and a held-out answer")
    sequence_level: bool = Option("the teacher answers the task's training prompts (greedy) and the student learns "
                                  "from its answers (RUN/teacher_answers.jsonl)", group=ON_POLICY)(False)
    keep_correct: bool = Option("sequence-level: keep only the answers the task's checker accepts",
                                group=ON_POLICY)(False)
    max_steps: int = 300
    eval_every: int = 100

    def validate(self) -> None:
        super().validate()
        if self.on_policy and self.logit_cache:
            raise TinyLMError("--on-policy needs the teacher to score the student's own samples: a logit cache "
                              "holds the data's tokens only (drop --logit-cache)")
        if self.sequence_level and self.logit_cache:
            raise TinyLMError("--sequence-level learns from the teacher's answers, which no logit cache holds")
        if self.base and (self.overrides or self.preset != "tiny" or self.arch != "modern"):
            raise TinyLMError("--base starts from a trained student: --preset, --arch and --set shape a fresh one")

    def check_teacher(self) -> None:
        """At the run's start, not in validate: a form or --help builds the defaults, which name no teacher."""
        if self.teacher is None and self.logit_cache is None:
            raise TinyLMError("--teacher is required: the checkpoint or run folder to learn from (or --logit-cache "
                              "DIR holding its logits)")

    @property
    def cache_top_k(self) -> int:
        return self.top_k or 32

    def student_config(self, vocab_size: int) -> ModelConfig:
        """A fresh student: the preset for this arch with the overrides, at the teacher's vocabulary size."""
        known = {f.name for f in dataclasses.fields(ModelConfig)}
        unknown = sorted(set(self.overrides) - known)
        if unknown:
            raise TinyLMError(f"unknown model field(s) {', '.join(unknown)}")
        overrides = {"vocab_size": vocab_size, **self.overrides}
        if self.gradient_checkpointing:
            overrides["gradient_checkpointing"] = True
        return preset_config(self.preset, self.arch, **overrides)
