"""One depth dial: `--depth N` sets the whole model and its recipe from N, by the rule in this file only.

A scaling sweep needs a family of models that differ by one number, so that "how big" is a single axis.
The rule, anchored at the `tiny` preset (which it reproduces exactly at depth 4: its shape, its heads and KV
heads, its context and the record's learning rates):

- width = 32 x depth (aspect ratio 32, nanochat's is 64: at widths this small a deeper-than-wide model
  keeps more of its parameters in the blocks instead of the 4096-token embedding);
- heads of 32 dimensions, so depth heads; KV heads: half of them (grouped-query attention, 2 queries per
  key) when their number is even, all of them when it is odd (4 heads -> 2 KV, as `tiny`; 5 -> 5);
- the context stays 256 tokens: a scaling law compares models on one task, and the loss per token depends on
  how much context each token sees (Hoffmann et al. held theirs at 2048 for the same reason);
- Muon's learning rate (the hidden matrices) stays the record's 0.02 at every width: Muon orthogonalises
  each update, so its spectral norm is the learning rate times a shape factor whatever the width, which is
  the condition for a rate to transfer across widths (Bernstein and Newhouse 2024; Jordan et al.'s Muon);
- the AdamW learning rate of the embedding, head and norms scales as 1/sqrt(width), from the record's 0.06 at
  width 128 (nanochat scales its AdamW rates by (width/768)^-0.5 for the same reason: an embedding row's
  update is one AdamW step of size lr, and the logits sum width of them);
- the batch is 4 x depth rows of 256 tokens (16 at depth 4, the record's): a bigger model trains for more
  tokens at its compute optimum and its useful batch grows with it, while a small model in a small budget
  still gets steps enough to warm up and decay (docs/scaling.md shows the learning-rate sweep that checks
  the rates, at three depths).

`small` and `student` are not on the rule (their head sizes and aspect ratios are their own): the presets stay.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from tinylm.config import ModelConfig
from tinylm.errors import TinyLMError
from tinylm.presets import preset_config

ASPECT = 32  # width per block
HEAD_DIM = 32
CONTEXT = 256
MUON_LR = 0.02  # the record's, at every width
ADAMW_LR_AT_128 = 0.06  # the record's AdamW rate beside Muon, at the anchor's width
ANCHOR_WIDTH = 128
ROWS_PER_DEPTH = 4
MAX_DEPTH = 64


@dataclass(frozen=True)
class DepthRule:
    """What `--depth N` sets: the model's shape and the recipe's learning rates and batch."""

    depth: int

    def __post_init__(self) -> None:
        if not 1 <= self.depth <= MAX_DEPTH:
            raise TinyLMError(f"--depth must be in [1, {MAX_DEPTH}] (got {self.depth})")

    @property
    def width(self) -> int:
        return ASPECT * self.depth

    @property
    def heads(self) -> int:
        return self.width // HEAD_DIM

    @property
    def kv_heads(self) -> int:
        return self.heads // 2 if self.heads % 2 == 0 else self.heads

    @property
    def adamw_lr(self) -> float:
        return ADAMW_LR_AT_128 * math.sqrt(ANCHOR_WIDTH / self.width)

    @property
    def muon_lr(self) -> float:
        return MUON_LR

    @property
    def batch_size(self) -> int:
        return ROWS_PER_DEPTH * self.depth

    def model_config(self, arch: str = "modern", **overrides: object) -> ModelConfig:
        """The `tiny` preset reshaped by the rule (its vocabulary and everything else unchanged), then overrides."""
        shape: dict[str, object] = dict(n_blocks=self.depth, n_embed=self.width, n_head=self.heads,
                                        context_length=CONTEXT)
        if arch == "modern":
            shape["n_kv_head"] = self.kv_heads
        return preset_config("tiny", arch, **{**shape, **overrides})

    def describe(self) -> str:
        heads = f"{self.heads} head{'s' if self.heads > 1 else ''}"
        return (f"depth {self.depth}: width {self.width}, {heads} of {HEAD_DIM} ({self.kv_heads} KV), "
                f"context {CONTEXT}; AdamW lr {self.adamw_lr:.4g}, Muon lr {self.muon_lr:g}, "
                f"batch {self.batch_size} rows (depth.py)")
