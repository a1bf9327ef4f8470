"""SFTConfig: what `tinylm sft` can be told, beyond what every post-training stage shares.
"""

from __future__ import annotations

from dataclasses import dataclass

from tinylm.stages.post_config import PostTrainConfig


@dataclass
class SFTConfig(PostTrainConfig):
    """PostTrainConfig plus packing; the defaults fine-tune the demo model on `builtin:arith` in minutes."""

    packing: bool = True
