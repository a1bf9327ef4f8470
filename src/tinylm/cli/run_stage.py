"""What every training command does after parsing its options: resume with the run's own options, train the
stage on the one engine, print the summary on rank 0, and turn how it stopped into an exit status."""

from __future__ import annotations

import argparse
import os
from collections.abc import Callable
from typing import Any

EXIT_STATUS = {"nan": 1, "interrupted": 130}  # everything else (a budget reached) is 0


def run_stage(args: argparse.Namespace, config: Any, stage: Any, defaults: dict[str, Any],
              report: Callable[[Any], None]) -> int:
    """Train `stage` as `config` says; `report(summary)` prints the command's own summary on rank 0."""
    from tinylm.cli.commands.train import explicit_options, resumed_config
    from tinylm.train.loop import run_training

    if config.resume is not None:
        config = resumed_config(config, explicit_options(args, defaults), stage.run_name(config))
    summary = run_training(config, stage=stage)
    if int(os.environ.get("RANK", "0")) == 0:
        report(summary)
    return EXIT_STATUS.get(summary.stopped, 0)
