"""What every training command does: flags from its stage's config, resume with the run's own options, train
the stage on the one engine, print the summary on rank 0, and turn how it stopped into an exit status.

A stage of the table (stages/__init__.py) is a command with no code of its own: `add_stage_arguments`
generates its flags from the config's option fields and `run_stage_command` runs it. A command module
(cli/commands/NAME.py) adds only its --help examples and, if it wants, its own closing lines.
"""

from __future__ import annotations

import argparse
import os
import sys
from collections.abc import Callable
from typing import Any

from tinylm.cli.options import add_config_options, config_from_args
from tinylm.cli.run_summary import before_after, print_outcome, steps_and_loss
from tinylm.errors import TinyLMError
from tinylm.options import option_specs
from tinylm.stages import StageSpec
from tinylm.train.loop import TrainSummary, run_training
from tinylm.train.resume_options import describe_taken, options_for_resume
from tinylm.train.run_dir import choose_run_dir, find_resume_checkpoint

EXIT_STATUS = {"nan": 1, "interrupted": 130}  # everything else (a budget reached) is 0


def add_stage_arguments(parser: argparse.ArgumentParser, spec: StageSpec) -> None:
    add_config_options(parser, spec.config)


def flag_defaults(config_class: type) -> dict[str, Any]:
    """What each generated flag holds when it is not given (a required --base: "", not a placeholder)."""
    return {spec.name: spec.default for spec in option_specs(config_class)}


def explicit_options(args: argparse.Namespace, defaults: dict[str, Any]) -> set[str]:
    """Options the user gave (command line or --config file): what differs from the stage's defaults."""
    given = {k for k, v in vars(args).items() if k in defaults and v != defaults[k]}
    if not vars(args).get("overrides"):  # no --set: an empty list of items, not the default's empty table
        given.discard("overrides")
    return given


def resumed_config(config: Any, explicit: set[str], run_name: tuple[str, str] | None = None) -> Any:
    """A `--resume` run takes its model, data and options from the run it continues, except what was given.

    `run_name` is the stage's default run folder name (runs/<name>-<kind>); pretraining's is <preset>-<arch>.
    """
    run_dir = choose_run_dir(config.out, *(run_name or (config.preset, config.arch)), config.resume)
    checkpoint = find_resume_checkpoint(config.resume, run_dir)
    if checkpoint is None:
        return config
    merged, taken = options_for_resume(config.to_dict(), explicit, checkpoint)
    if config.resume == "latest":
        merged["out"] = str(run_dir)
    if taken and int(os.environ.get("RANK", "0")) == 0:
        print(describe_taken(merged, taken), file=sys.stderr)
    return type(config)(**merged)


def nothing_to_resume(resume: str, out: str | None) -> str:
    """Why a `--resume` without `--base` cannot run: no checkpoint was found to take the base from."""
    where = f"{out} holds no checkpoint to continue" if out else "no --out names the run folder to continue"
    return f"--resume {resume}: {where}, and no --base was given to start a new run from"


def print_scores(spec: StageSpec, summary: TrainSummary) -> None:
    """The closing lines of a stage: `done:` with its scores before -> after, then its checkpoint and plots."""
    parts = steps_and_loss(summary)
    print_outcome(summary, parts + before_after(summary, spec.scores),
                  [f"{'loss plot' if plot == 'loss.png' else 'curves'}: {os.path.join(summary.run_dir, plot)}"
                   for plot in spec.plots])


def run_stage_command(args: argparse.Namespace, spec: StageSpec,
                      report: Callable[[TrainSummary], None] | None = None) -> int:
    """Train `spec`'s stage as the parsed options say; `report(summary)` prints the closing lines on rank 0."""
    config = config_from_args(spec.config, args)
    stage = spec.stage()
    if config.resume is not None:
        config = resumed_config(config, explicit_options(args, flag_defaults(spec.config)), stage.run_name(config))
        if spec.starts_from_base and not config.base:
            raise TinyLMError(nothing_to_resume(config.resume, config.out))
    summary = run_training(config, stage=stage)
    if int(os.environ.get("RANK", "0")) == 0:
        (report or (lambda s: print_scores(spec, s)))(summary)
    return EXIT_STATUS.get(summary.stopped, 0)
