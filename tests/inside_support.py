"""A folder of runs for the Inside page's tests: a two-block micro model with weights-only snapshots, and a copy
of it marked as a reward model (a checkpoint the page must refuse)."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

from test_train_support import MICRO, data_dir
from tinylm.checkpoint import list_checkpoints
from tinylm.cli.main import main


def inside_root(root: Path) -> Path:
    sets = [f"--set={k}={v}" for k, v in {**MICRO, "n_blocks": 2}.items()]
    assert main(["train", "--data", str(data_dir()), "--out", str(root / "lm"), *sets, "--batch-size", "4",
                 "--seq-len", "32", "--max-steps", "12", "--snapshot-every", "4", "--eval-every", "0",
                 "--sample-tokens", "0", "--no-progress", "--seed", "1", "--dtype", "fp32", "--compile", "off",
                 "--attention", "sdpa"]) == 0
    shutil.copytree(root / "lm", root / "scorer", ignore=shutil.ignore_patterns("snapshots"))
    checkpoint = list_checkpoints(root / "scorer")[-1]
    config = json.loads((checkpoint / "config.json").read_text())
    (checkpoint / "config.json").write_text(json.dumps({**config, "reward_head": "score"}))
    return root
