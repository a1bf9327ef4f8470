"""The pipeline's settings: one table per stage, each checked against that stage's own config fields.

    out = "runs/pipeline"
    task = "builtin:arith?digits=2&ops=+"  # what SFT, DPO and GRPO learn and eval measures

    [pretrain]                                # any PretrainConfig field
    max_steps = 1200
    [sft]                                     # any SFTConfig field
    lr = 5e-4
    [grpo]                                    # the RL slot: any RLConfig field (algo = "dapo" runs DAPO)
    group_size = 16
    [eval]                                    # any EvalOptions field, and `tasks` added to the table's
    examples = 500

A key no stage knows is refused with one line naming the table, the key and the known keys, so a typo
never runs twenty minutes with a default. The fields the pipeline wires itself (where a stage's base
and data come from, its run folder, resume) cannot be set.

The road is a list of slots, each a stage of the stage table (stages/__init__.py): a slot's name is its
table here and its folder under `out`. The last slot is named grpo (its folder and table keep that
name) but runs the RL stage with any algorithm. A row's `road_slot` puts it on the road, in the table's
order; its DEFAULTS here are the road's settings for it.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass, field
from typing import Any

from tinylm.data.prepare import prepare_dataset
from tinylm.errors import TinyLMError
from tinylm.evaluate.tasks import EvalOptions
from tinylm.options import option_specs
from tinylm.options_file import load_options_file
from tinylm.runtime.device import DTYPES
from tinylm.stages import STAGES as STAGES_TABLE
from tinylm.stages import StageSpec

# (slot, stage of the table): the pipeline's steps in order
ROAD: tuple[tuple[str, str], ...] = tuple((spec.road_slot, name) for name, spec in STAGES_TABLE.items()
                                          if spec.road_slot is not None)
STAGES = tuple(slot for slot, _ in ROAD)  # every slot; the optional ones come last
DEFAULT_STAGES = tuple(slot for slot, name in ROAD if not STAGES_TABLE[name].road_optional)
TABLES = ("prepare", *STAGES, "eval")  # a pipeline file's tables: a slot without DEFAULTS has the stage's own
WIRED = ("base", "out", "resume", "data", "task")  # set by the pipeline: each stage starts from the one before
TOP_LEVEL = ("out", "task", "seed", "threads", "dtype", "stages")
DEFAULT_TASK = "builtin:arith?digits=2&ops=+"

# The default road: the tiny model, about 9 minutes on two CPU cores (measured for three seeds in both
# precisions in docs/pipeline-command.md). Two-digit sums: 8,989 training problems, 1,011 held out, of which
# eval scores 1,000, each stage's gain given with the paired 95% interval of its measurement (gains.py).
# Every stage runs its whole schedule: none is cut short to leave the next something to do. What grows
# from stage to stage is the data, as in real post-training (demonstrations are the scarcest, a verifier
# the cheapest): SFT learns from 2,000 problems' answers, RPO from pairs of 5,000 problems (SFT's and 3,000
# more), GRPO from all 8,989 prompts. A stage gains on held-out problems when it brings problems the stages
# before did not see: GRPO on prompts its model was trained on gains a point, on fresh ones eight
# (docs/pipeline-command.md). DPO is RPO (DPO + the chosen answer's NLL): plain DPO lowers both answers'
# likelihood on this task. GRPO's WSD schedule decays over its last 20%, which settles the policy.
DEFAULTS: dict[str, dict[str, Any]] = {
    "prepare": {},
    "pretrain": dict(preset="tiny", arch="modern", max_steps=600, batch_size=16, eval_every=200, eval_batches=10,
                     checkpoint_every=100, sample_tokens=0),
    "sft": dict(max_steps=1500, batch_size=32, seq_len=64, eval_every=100, eval_examples=200, checkpoint_every=100,
                max_new_tokens=8, train_examples=2_000),
    "dpo": dict(loss="rpo", max_steps=1000, batch_size=16, seq_len=48, lr=1e-4, eval_every=250, eval_examples=200,
                checkpoint_every=250, max_new_tokens=8, train_examples=5_000),
    "grpo": dict(max_steps=1000, batch_size=16, group_size=8, lr=1e-4, beta=0.0, max_new_tokens=6, schedule="wsd",
                 decay_fraction=0.2, eval_every=100, eval_examples=200, checkpoint_every=100),
    # on-policy distillation of the SFT model from the GRPO model (docs/distill.md: its goal, measured)
    "distill": dict(on_policy=1.0, divergence="reverse_kl", ce_weight=0.0, max_steps=1000, batch_size=16,
                    seq_len=64, optimizer="adamw", lr=1e-4, warmup_steps=0, schedule="constant", max_new_tokens=6,
                    eval_every=100, eval_examples=200, checkpoint_every=100, train_examples=8_989, dtype="fp32"),
    "eval": dict(examples=1000, bpb_batches=10, max_new_tokens=8),
}


def _stage_fields(section: str) -> set[str]:
    if section == "prepare":
        import inspect

        return set(inspect.signature(prepare_dataset).parameters) - {"out", "progress", "context_length"}
    if section == "eval":
        return {f.name for f in dataclasses.fields(EvalOptions)} | {"tasks"}
    stage = slot_stage(section)
    return {spec.name for spec in option_specs(stage.config)} - set(WIRED) - set(stage.road_inputs)


def slot_stage(slot: str) -> StageSpec:
    """The stage of the table that runs in a slot of the road."""
    return STAGES_TABLE[dict(ROAD)[slot]]


@dataclass
class PipelineConfig:
    out: str = "runs/pipeline"
    task: str = DEFAULT_TASK
    seed: int = 1337
    threads: int | None = None
    dtype: str | None = None  # every stage's --dtype but the RL slot's (fp32: sampling and training log-probs agree)
    stages: list[str] = field(default_factory=lambda: list(DEFAULT_STAGES))  # a prefix of STAGES: where the road ends
    sections: dict[str, dict[str, Any]] = field(default_factory=lambda: {k: dict(DEFAULTS.get(k, {})) for k in TABLES})

    def section(self, name: str) -> dict[str, Any]:
        return self.sections.get(name, {})


def _field_default(section: str, name: str) -> Any:
    if section == "prepare":
        import inspect

        return inspect.signature(prepare_dataset).parameters[name].default
    if section == "eval":
        return getattr(EvalOptions(), name, [])
    return {spec.name: spec.default for spec in option_specs(slot_stage(section).config)}[name]


def _check_type(where: str, section: str, name: str, value: Any) -> None:
    """A value of the default's type (an int where a float is expected too); None-default fields take any."""
    default = _field_default(section, name)
    if default is None:
        return
    expected = (int, float) if type(default) is float else type(default)
    if not isinstance(value, expected) or (isinstance(value, bool) and type(default) is not bool):
        raise TinyLMError(f"{where}: [{section}] {name} = {value!r}: expected {type(default).__name__}")


def parse_pipeline_config(table: dict[str, Any], where: str = "pipeline config") -> PipelineConfig:
    """A PipelineConfig from a TOML table; unknown tables and keys are one TinyLMError line."""
    config = PipelineConfig()
    for key, value in table.items():
        if isinstance(value, dict):
            if key not in TABLES:
                raise TinyLMError(f"{where}: unknown table [{key}] (known: {', '.join(TABLES)})")
            known = _stage_fields(key)
            for name in value:
                if key not in ("prepare", "eval") and (name in WIRED or name in slot_stage(key).road_inputs):
                    raise TinyLMError(f"{where}: [{key}] {name} is set by the pipeline (each stage starts from "
                                      "the one before it, in its own folder under out)")
                if name not in known:
                    raise TinyLMError(f"{where}: [{key}] unknown key {name!r} (known: {', '.join(sorted(known))})")
                _check_type(where, key, name, value[name])
            config.sections[key] = {**config.sections[key], **value}
        elif key in TOP_LEVEL:
            setattr(config, key, value)
        else:
            raise TinyLMError(f"{where}: unknown key {key!r} (known: {', '.join(TOP_LEVEL)}, "
                              f"and the tables [{'], ['.join(TABLES)}])")
    if config.dtype is not None and config.dtype not in DTYPES:
        raise TinyLMError(f"{where}: dtype = {config.dtype!r}: choose one of {', '.join(DTYPES)}")
    if not isinstance(config.stages, list) or config.stages != list(STAGES[:len(config.stages)]) \
            or not config.stages:
        raise TinyLMError(f"{where}: stages must be a prefix of {list(STAGES)}, got {config.stages!r}")
    return config


def load_pipeline_config(path: str | None) -> PipelineConfig:
    if path is None:
        return PipelineConfig()

    return parse_pipeline_config(load_options_file(path), path)
