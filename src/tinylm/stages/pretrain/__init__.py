"""Pretraining: the first stage of every model, next-token prediction on token shards.

`pretrain(config)` is `run_training(config, stage=PretrainStage())`: what `tinylm train` runs.
"""

from tinylm.stages.pretrain.stage import PretrainStage, pretrain

__all__ = ["PretrainStage", "pretrain"]
