"""build_model(config): the one place that maps a config to a model class."""

from __future__ import annotations

from torch import nn

from tinylm.config import ModelConfig
from tinylm.models.classic import ClassicGPT
from tinylm.models.modern.model import ModernGPT


def build_model(config: ModelConfig) -> nn.Module:
    config.validate()
    return ClassicGPT(config) if config.arch == "classic" else ModernGPT(config)
