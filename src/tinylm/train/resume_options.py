"""A resumed run is the same run: its model, data and options come from the run, not from today's defaults.

`tinylm train --out runs/small --resume latest --max-steps 10000` must continue the `small` run
with its own preset, `--set` values, data folder, batch and optimizer, changing only what the
command line (or `--config` file) says. So the options of the checkpoint being resumed (saved in
its config.json under "train") fill in every option that was not given, that is every option still at
its default; the options that belong to this invocation alone (`Option(per_invocation=True)`: where to
run, how to show progress) are never taken from the run. This is the engine's rule (train/loop.py applies
it), so the command line, the pipeline, the studio and a Python caller of `run_training` resume alike.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any, TypeVar

from tinylm.checkpoint import read_checkpoint_config
from tinylm.options import ALWAYS_EXISTED, option_specs
from tinylm.runtime.distributed import launched_by_torchrun
from tinylm.train.config import EngineConfig

ConfigT = TypeVar("ConfigT", bound=EngineConfig)


def given_options(cfg: EngineConfig) -> set[str]:
    """The options this config was given: those that differ from what they are when not given (the class's
    default, or what the config fills in itself: `EngineConfig.unset_value`)."""
    defaults = {spec.name: spec.default for spec in option_specs(type(cfg))}
    return {name for name, default in defaults.items() if getattr(cfg, name) != cfg.unset_value(name, default)}


def options_for_resume(cls: type[EngineConfig], values: dict[str, Any], explicit: set[str],
                       checkpoint: Path) -> tuple[dict[str, Any], list[str]]:
    """(`values` with every option not in `explicit` taken from the checkpoint's run, the names taken)."""
    saved = read_checkpoint_config(checkpoint).get("train")
    if not isinstance(saved, dict):
        return dict(values), []  # a weights-only checkpoint (e.g. `tinylm import`) has no run options
    specs = option_specs(cls)
    # options a run folder may predate, with the value its run had before they existed (not today's default)
    before = {s.name: s.option.before_it_existed for s in specs
              if s.option.before_it_existed is not ALWAYS_EXISTED}
    per_invocation = {s.name for s in specs if s.option.per_invocation}
    saved = {**before, **saved}
    merged = dict(values)
    taken = []
    alone = not launched_by_torchrun()
    for name, value in saved.items():
        if name == "fsdp" and alone:  # sharding needs several processes; the checkpoint holds the model whole
            continue
        if name in values and name not in explicit and name not in per_invocation and values[name] != value:
            merged[name] = value
            taken.append(name)
    return merged, taken


def steps_problem(cfg: EngineConfig, step: int) -> str | None:
    """Why `cfg` cannot continue a run at `step`, or None: a --max-steps given below the step reached would end the
    run at once, "finished: reached --max-steps 5" at step 27 of 5."""
    if "max_steps" in given_options(cfg) and cfg.max_steps < step:
        return f"--max-steps {cfg.max_steps} is not beyond the run's step {step}"
    return None


def resumed_config(cfg: ConfigT, checkpoint: Path, run_dir: Path) -> tuple[ConfigT, str]:
    """`cfg` continuing `checkpoint`'s run in `run_dir` (every option not given taken from the run), and the line
    that says which were taken ("" when none)."""
    merged, taken = options_for_resume(type(cfg), cfg.to_dict(), given_options(cfg), checkpoint)
    if cfg.resume == "latest":
        merged["out"] = str(run_dir)
    return type(cfg)(**merged), describe_taken(merged, taken)


def describe_taken(merged: dict[str, Any], taken: list[str]) -> str:
    """One line for the console: which options the run supplied."""
    shown = ", ".join(f"{name}={merged[name]!r}" for name in sorted(taken))
    return f"resuming with the run's own options: {shown}" if taken else ""
