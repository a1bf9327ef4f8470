"""The lines a training run prints before its first step: where it writes, what it trains, on what, how.

Every choice the run made once (dtype, attention kernel, compile, the schedule) is said here, so that two
runs' headers show why their numbers differ.
"""

from __future__ import annotations

from typing import Any

from tinylm.runtime.device import describe
from tinylm.runtime.mkl_cbwr import describe as describe_mkl
from tinylm.train.optim import describe_optimizer


def header_lines(run: Any) -> list[str]:
    """The header of a set-up run (train/loop.py's `_Run`): folder, stage, model, device, choices, schedule."""
    m, cfg, env = run.mcfg, run.cfg, run.env
    lines = [f"run folder: {run.run_dir}", *run.stage.describe()]
    lines.append(f"model: {run.stage.model_label()} {m.arch}, "
                 f"{run.raw.num_params():,} parameters "
                 f"({run.raw.num_params(non_embedding=True):,} non-embedding), context {m.context_length}")
    lines.append(f"device: {describe(run.device)} x {env.world_size}, dtype {str(run.choices.dtype)[6:]}, "
                 f"{run.plan.full_tokens:,} tokens/step (batch {cfg.batch_size} x accum {cfg.grad_accum} "
                 f"x seq {run.seq_len} x {env.world_size} proc)")
    lines += run.plan.describe()
    if run.device.type == "cpu" and (mkl := describe_mkl()):
        lines.append(mkl)
    lines += run.choices.header_lines()
    lines.append(describe_optimizer(run.optimizer))
    lines.append(run.schedule.describe())
    if run.ckpt is not None and run.state is not None:
        lines.append(f"resumed from {run.ckpt} at step {run.step}")
    return lines
