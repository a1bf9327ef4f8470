"""Shared helpers for the evaluation tests (no tests here): a micro base model and its SFT, built once."""

from __future__ import annotations

import atexit
import functools
import shutil
import tempfile
from pathlib import Path

from test_train_support import MICRO
from test_train_support import config as pretrain_config

TASK = "builtin:arith?digits=1&ops=+"  # problems a micro model can hold
SFT_OPTIONS = dict(data=TASK, batch_size=4, seq_len=32, max_steps=6, warmup_steps=2, log_every=1, eval_every=3,
                   train_examples=64, eval_examples=8, max_new_tokens=4, progress=False, seed=3, threads=1, lr=3e-3)


@functools.lru_cache(maxsize=1)
def root() -> Path:
    folder = Path(tempfile.mkdtemp(prefix="tinylm-eval-tests-"))
    atexit.register(shutil.rmtree, folder, ignore_errors=True)
    return folder


@functools.lru_cache(maxsize=1)
def base_run() -> Path:
    """A micro model pretrained for 4 steps; a 128-token window holds the multiple-choice files' rows. By AdamW,
    as test_sft.base_run, for the same reason: the evaluation tests' expectations were set on this base."""
    from tinylm.stages.pretrain import pretrain

    pretrain(pretrain_config(root() / "base", max_steps=4, eval_batches=4, optimizer="adamw",
                             seq_len_warmup_steps=0, overrides={**MICRO, "context_length": 128}))
    return root() / "base"


@functools.lru_cache(maxsize=1)
def sft_run() -> Path:
    from tinylm.stages.sft.config import SFTConfig
    from tinylm.stages.sft.stage import SFTStage
    from tinylm.train.loop import run_training

    run_training(SFTConfig(base=str(base_run()), out=str(root() / "sft"), **SFT_OPTIONS), stage=SFTStage())
    return root() / "sft"
