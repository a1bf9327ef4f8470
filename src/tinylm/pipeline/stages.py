"""Each step of the road as a call to its stage's Python API: the same engine and stages the commands use.

    prepare   data/prepare.py `prepare_dataset` (the embedded corpus by default, reused when up to date)
    pretrain  run_training(PretrainConfig, stage=PretrainStage())     OUT/pretrain
    sft       run_training(SFTConfig(base=OUT/pretrain), SFTStage())  OUT/sft
    dpo       run_training(DPOConfig(base=OUT/sft), DPOStage())       OUT/dpo
    grpo      run_training(RLConfig(base=OUT/dpo), RLStage())         OUT/grpo  (the RL slot, any --algo)
    distill   run_training(DistillConfig(base=OUT/sft, teacher=OUT/grpo), DistillStage())  OUT/distill (optional)

Each slot's config class and stage come from the stage table (config.slot_stage); what it learns from
(`data`, or RL's `task`) is the row's `learns_from`.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from tinylm.data.prepare import prepare_dataset
from tinylm.pipeline.config import STAGES, PipelineConfig, slot_stage
from tinylm.train.stage import Stage

UNSTABLE = ("resume", "progress")  # settings that may differ between a run and its continuation


def stage_object(slot: str) -> Stage:
    return slot_stage(slot).stage()


def prepare_data(pipeline: PipelineConfig, progress: bool) -> Path:
    """The prepared corpus for the first stage's model (its vocabulary and window): the one that trains a fresh
    model on it."""
    first = STAGES[0]
    model = slot_stage(first).config(**pipeline.section(first)).model_config()
    options = {"vocab_size": model.vocab_size, **pipeline.section("prepare")}
    return prepare_dataset(**options, progress=progress, context_length=model.context_length)


def stage_config(name: str, pipeline: PipelineConfig, folder: Path, data: Path | None, base: Path | None) -> Any:
    """The stage's config: its [table] over the defaults, wired to the folder and the stage before it."""
    wired: dict[str, Any] = {"out": str(folder), "seed": pipeline.seed}
    if pipeline.threads:
        wired["threads"] = pipeline.threads
    spec = slot_stage(name)
    if spec.road_inputs:  # the row names what it takes from the road
        for field_name, source in spec.road_inputs.items():
            wired[field_name] = pipeline.task if source == "task" else str(folder.parent / source)
    elif spec.starts_from_base:
        wired["base"] = str(base)
        wired[spec.learns_from] = pipeline.task
    else:
        wired["data"] = str(data)
    shared = {"dtype": pipeline.dtype} if pipeline.dtype and not spec.pins_dtype else {}  # a table's own wins
    return spec.config(**{**shared, **pipeline.section(name), **wired})


def settings_of(config: Any) -> dict[str, Any]:
    return {k: v for k, v in config.to_dict().items() if k not in UNSTABLE}
