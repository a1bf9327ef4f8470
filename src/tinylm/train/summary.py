"""How a training run ends: the budget it stops at, the lines that say why, and what it achieved (`TrainSummary`)."""

from __future__ import annotations

import math
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from tinylm.checkpoint import list_checkpoints
from tinylm.train.config import EngineConfig


@dataclass
class TrainSummary:
    """What a run achieved; `tinylm compare` tabulates these."""

    run_dir: str
    checkpoint: str | None
    arch: str
    steps: int
    tokens: int
    final_loss: float | None
    dev_loss: float | None
    dev_bpb: float | None
    tokens_per_s: float
    mfu: float | None
    params: int
    non_embedding_params: int
    stopped: str  # max_steps | max_tokens | time_budget | target | interrupted | nan
    wall_s: float
    sample: str | None = None
    stage: str = ""  # the stage's name (the table's row)
    evaluation: dict[str, float] = field(default_factory=dict)  # the stage's last evaluation

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


# what an interrupted run says about going on: true of `tinylm train` and the stages, not of a caller that cannot
# resume its runs (`tinylm speedrun` says its own)
RESUME_HINT = "state saved, continue with --resume latest"


def stop_reason(stopped: str, cfg: EngineConfig, target: str = "", on_interrupt: str = RESUME_HINT) -> str:
    """The end of the run's last line, `stopped at step N: ...` (`target`: the stage's own reason to stop;
    `on_interrupt`: what follows "interrupted", if anything)."""
    return {"max_steps": f"reached --max-steps {cfg.max_steps}",
            "max_tokens": f"reached --max-tokens {cfg.max_tokens}",
            "time_budget": f"used the --time-budget of {cfg.time_budget:g} s (of training, across resumes: a larger "
                           "one continues the run)" if cfg.time_budget else "",
            "target": target,
            "interrupted": f"interrupted; {on_interrupt}" if on_interrupt else "interrupted",
            "nan": "stopped on a non-finite loss"}[stopped]


def budget_reached(cfg: EngineConfig, step: int, tokens: int, seconds: float = 0.0) -> str | None:
    """"max_steps", "max_tokens" or "time_budget" once the run has done what it was asked (the seconds: its
    training time across resumes); None while it has not."""
    if step >= cfg.max_steps:
        return "max_steps"
    if cfg.max_tokens is not None and tokens >= cfg.max_tokens:
        return "max_tokens"
    if cfg.time_budget is not None and seconds >= cfg.time_budget:
        return "time_budget"
    return None


def nan_message(loss: float, norm: float, step: int, run_dir: Path) -> str:
    """What stopped the run at `step` (a non-finite loss or gradient norm), and what was kept."""
    good = list_checkpoints(run_dir)
    kept = f"the last good checkpoint is {good[-1]}" if good else "no checkpoint was saved yet"
    what = f"loss is {loss}" if not math.isfinite(loss) else f"gradient norm is {norm}"
    return (f"tinylm: {what} at step {step}; stopping without saving the broken weights; {kept}. "
            "Try a lower --lr, more --warmup-steps or --grad-clip 1.0.")
