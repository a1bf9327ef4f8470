"""What every training command does: flags from its stage's config, train the stage on the one engine (which
resumes with the run's own options), print the summary on rank 0, and turn how it stopped into an exit status.

A stage of the table (stages/__init__.py) is a command with no code of its own: `add_stage_arguments`
generates its flags from the config's option fields and `run_stage_command` runs it. A command module
(cli/commands/NAME.py) adds only its --help examples and, if it wants, its own closing lines.
"""

from __future__ import annotations

import argparse
import os
from collections.abc import Callable

from tinylm.cli.options import add_config_options, config_from_args
from tinylm.cli.run_summary import before_after, print_outcome, steps_and_loss
from tinylm.runtime.distributed import launched_by_torchrun
from tinylm.stages import StageSpec
from tinylm.train.loop import TrainSummary, run_training

EXIT_STATUS = {"nan": 1, "interrupted": 130}  # everything else (a budget reached) is 0


def add_stage_arguments(parser: argparse.ArgumentParser, spec: StageSpec) -> None:
    add_config_options(parser, spec.config)


def print_scores(spec: StageSpec, summary: TrainSummary) -> None:
    """The closing lines of a stage: `done:` with its scores before -> after, then its checkpoint and plots."""
    parts = steps_and_loss(summary)
    print_outcome(summary, parts + before_after(summary, spec.scores),
                  [f"{'loss plot' if plot == 'loss.png' else 'curves'}: {os.path.join(summary.run_dir, plot)}"
                   for plot in spec.plots])


def run_stage_command(args: argparse.Namespace, spec: StageSpec,
                      report: Callable[[TrainSummary], None] | None = None) -> int:
    """Train `spec`'s stage as the parsed options say; `report(summary)` prints the closing lines on rank 0."""
    summary = run_training(config_from_args(spec.config, args), stage=spec.stage())  # resume: the engine's rule
    if int(os.environ.get("RANK", "0")) == 0:
        (report or (lambda s: print_scores(spec, s)))(summary)
    return exit_status(summary.stopped)


def exit_status(stopped: str) -> int:
    """The exit status of a run that stopped this way. Under torchrun a polite stop (its workers signalled, as the
    studio's stop does) is 0: torchrun reads any other status as a failed worker, prints its ChildFailedError
    traceback and, with --max-restarts, starts the group again."""
    if stopped == "interrupted" and launched_by_torchrun():
        return 0
    return EXIT_STATUS.get(stopped, 0)
