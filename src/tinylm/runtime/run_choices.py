"""A training run's measured choices, decided together, once, before its stage is set up.

The autocast dtype, the attention kernel and the compile plan are each decided by their own policy
(`precision.py`, `attention_policy.py`, `compile_policy.py`); this module asks them in the order their
inputs need (attention is timed in the chosen dtype, the compile probe runs the chosen kernel) and
keeps the answers in one frozen `RunChoices`. A resumed run under `auto` keeps the dtype and the kernel
its checkpoint was trained with, so resume stays bit-exact; an explicit flag still wins.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

import torch

from tinylm.config import ModelConfig
from tinylm.runtime import attention_policy, precision
from tinylm.runtime.attention_policy import choose_attention
from tinylm.runtime.choice import Choice
from tinylm.runtime.compile_policy import plan_compile
from tinylm.runtime.precision import choose_precision


@dataclass(frozen=True)
class RunChoices:
    """Every measured choice of one training run; frozen, so no later step can change one."""

    precision: Choice[torch.dtype]
    attention: Choice[str]
    compile: Choice[bool]

    @property
    def dtype(self) -> torch.dtype:
        return self.precision.value

    def all(self) -> tuple[Choice[Any], ...]:
        return self.precision, self.attention, self.compile

    def header_lines(self) -> list[str]:
        """`precision: ...`, `attention: ...`, `compile: ...`: the run header's lines, in this order."""
        return [f"{choice.kind}: {choice.reason}" for choice in self.all()]

    def record(self) -> dict[str, dict[str, Any]]:
        """For a checkpoint's config.json: each choice's value, reason and the numbers it was decided on."""
        return {choice.kind: choice.record() for choice in self.all()}


@dataclass(frozen=True)
class RunShape:
    """What the choices are measured on: the model, its batch, where it runs, and how long the run is."""

    model_config: ModelConfig
    batch_size: int
    seq_len: int
    device: torch.device
    planned_passes: int  # forward + backward passes of one micro-batch still to run
    time_budget_s: float | None = None
    shapes: int = 1  # input shapes the planned passes use (a warmup's shorter rows are others), each compiled


def decide_run_choices(dtype: str, attention: str, compile_mode: str, shape: RunShape,
                       saved: Mapping[str, Any] | None = None) -> RunChoices:
    """`--dtype`, `--attention`, `--compile` as given (`auto`: measured); `saved`: a resumed run's train state.

    Under torchrun every rank calls this at the same point: each measured policy decides on rank 0.
    """
    saved = saved or {}
    kept_dtype, kept_kernel = saved.get("dtype"), saved.get("attention")
    if dtype == "auto" and kept_dtype:
        chosen_precision = resumed(precision.CACHE_KIND, getattr(torch, kept_dtype), kept_dtype)
    else:
        chosen_precision = choose_precision(shape.device, dtype, shape.model_config, shape.batch_size, shape.seq_len)
    if attention == "auto" and kept_kernel:
        chosen_attention = resumed(attention_policy.CACHE_KIND, kept_kernel, kept_kernel)
    else:
        chosen_attention = choose_attention(attention, shape.model_config, shape.batch_size, shape.seq_len,
                                            chosen_precision.value, shape.device)
    chosen_compile = plan_compile(compile_mode, shape.planned_passes, None, model_config=shape.model_config,
                                  batch_size=shape.batch_size, seq_len=shape.seq_len, dtype=chosen_precision.value,
                                  device=shape.device, time_budget_s=shape.time_budget_s,
                                  attention=chosen_attention.value, shapes=shape.shapes)
    return RunChoices(chosen_precision, chosen_attention, chosen_compile)


def resumed(kind: str, value: Any, name: str) -> Choice[Any]:
    return Choice(kind, value, f"{name}: as the run being resumed")
