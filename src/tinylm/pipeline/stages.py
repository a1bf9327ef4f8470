"""Each step of the road as a call to its stage's Python API: the same engine and stages the commands use.

    prepare   data/prepare.py `prepare_dataset` (the embedded corpus by default, reused when up to date)
    pretrain  run_training(TrainConfig, stage=PretrainStage())        OUT/pretrain
    sft       run_training(SFTConfig(base=OUT/pretrain), SFTStage())  OUT/sft
    dpo       run_training(DPOConfig(base=OUT/sft), DPOStage())       OUT/dpo
    grpo      run_training(RLConfig(base=OUT/dpo), RLStage())         OUT/grpo

A new stage plugs in here: its config class in `config.stage_config_class`, its stage object in
`stage_object`, and its name in `config.STAGES` after the stage it starts from.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from tinylm.pipeline.config import PipelineConfig, stage_config_class
from tinylm.train.stage import Stage

UNSTABLE = ("resume", "progress")  # settings that may differ between a run and its continuation


def stage_object(name: str) -> Stage:
    if name == "pretrain":
        from tinylm.stages.pretrain.stage import PretrainStage

        return PretrainStage()
    if name == "sft":
        from tinylm.stages.sft.stage import SFTStage

        return SFTStage()
    if name == "dpo":
        from tinylm.stages.preference.dpo import DPOStage

        return DPOStage()
    from tinylm.stages.rl.stage import RLStage

    return RLStage()


def prepare_data(pipeline: PipelineConfig, progress: bool) -> Path:
    """The prepared corpus for the pretraining model's vocabulary and window."""
    from tinylm.data.prepare import prepare_dataset
    from tinylm.train.config import TrainConfig

    model = TrainConfig(**pipeline.section("pretrain")).model_config()
    options = {"vocab_size": model.vocab_size, **pipeline.section("prepare")}
    return prepare_dataset(**options, progress=progress, context_length=model.context_length)


def stage_config(name: str, pipeline: PipelineConfig, folder: Path, data: Path | None, base: Path | None) -> Any:
    """The stage's config: its [table] over the defaults, wired to the folder and the stage before it."""
    wired: dict[str, Any] = {"out": str(folder), "seed": pipeline.seed}
    if pipeline.threads:
        wired["threads"] = pipeline.threads
    if name == "pretrain":
        wired["data"] = str(data)
    else:
        wired["base"] = str(base)
        wired["task" if name == "grpo" else "data"] = pipeline.task
    return stage_config_class(name)(**{**pipeline.section(name), **wired})


def settings_of(config: Any) -> dict[str, Any]:
    return {k: v for k, v in config.to_dict().items() if k not in UNSTABLE}
