"""SFTConfig: what `tinylm sft` can be told, beyond what every post-training stage shares.
"""

from __future__ import annotations

from dataclasses import dataclass

from tinylm.options import Option
from tinylm.stages.post_config import BASE_AND_DATA, PostTrainConfig


@dataclass
class SFTConfig(PostTrainConfig):
    """PostTrainConfig plus packing and the reasoning mask; the defaults fine-tune the demo model on builtin:arith."""

    packing: bool = Option("one conversation per row instead of several packed", flag="--no-packing",
                           group=BASE_AND_DATA)(True)
    learn_reasoning: bool = Option("no loss on an assistant's reasoning segment (it stays context)",
                                   flag="--no-learn-reasoning", group=BASE_AND_DATA)(True)
