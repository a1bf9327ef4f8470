"""Shared helpers for the training tests (no tests here): a tiny real dataset and micro-model runs.

The dataset goes through the real `prepare_dataset` (a 300-token BPE on ~60 KB of generated Python-like
text), so the training tests exercise the same shards, sidecars and loader as `tinylm train`. It is
built once per test session in a private temporary folder.
"""

from __future__ import annotations

import atexit
import functools
import json
import os
import random
import shutil
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

VOCAB = 300
MICRO: dict[str, Any] = dict(vocab_size=VOCAB, context_length=32, n_embed=32, n_head=2, n_blocks=1, n_kv_head=1)
MICRO_CLASSIC: dict[str, Any] = {k: v for k, v in MICRO.items() if k != "n_kv_head"}


def _document(rng: random.Random, index: int) -> str:
    names = ["alpha", "beta", "gamma", "delta", "value", "count", "total", "item", "index", "result"]
    lines = [f'"""Module {index}: generated for the training tests."""', ""]
    for f in range(rng.randint(6, 12)):
        a, b = rng.sample(names, 2)
        lines += [f"def {rng.choice(names)}_{f}({a}, {b}):",
                  f"    {a} = {a} + {rng.randint(0, 99)} * {b}",
                  f"    if {a} > {b}:",
                  f"        return {a} - {b}",
                  f"    return [{a} for {a} in range({b})]", ""]
    return "\n".join(lines) + "\n"


@functools.lru_cache(maxsize=1)
def data_dir() -> Path:
    """A prepared data folder (train + dev shards, tokenizer.json), shared by the whole session."""
    from tinylm.data.prepare import prepare_dataset

    root = Path(tempfile.mkdtemp(prefix="tinylm-train-tests-"))
    atexit.register(shutil.rmtree, root, ignore_errors=True)
    corpus = root / "corpus"
    corpus.mkdir()
    rng = random.Random(0)
    for i in range(60):
        (corpus / f"doc_{i:03d}.txt").write_text(_document(rng, i), encoding="utf-8")
    return prepare_dataset(corpus=str(corpus), tokenizer="bpe", vocab_size=VOCAB, out=root / "data",
                           dev_fraction=0.2, progress=False, context_length=32)


def hooked_build_model(hook: Any) -> Any:
    """A `build_model` replacement that registers `hook(module, args, output)` as a forward hook."""
    from tinylm.models.factory import build_model

    def build(model_config: Any) -> Any:
        model = build_model(model_config)
        model.register_forward_hook(hook)
        return model

    return build


def config(out: Path | None, **changes: Any) -> Any:
    """A PretrainConfig for a ~25k-parameter model on the test data, logging every step.

    One thread: on a busy 2-core machine, OpenMP threads waiting for each other cost more than tiny
    matmuls gain.
    """
    from tinylm.stages.pretrain.config import PretrainConfig

    # dtype, compile and attention fixed: no measured choice, the same math on every machine
    base: dict[str, Any] = dict(data=str(data_dir()), out=None if out is None else str(out), overrides=dict(MICRO),
                                batch_size=4, seq_len=16, max_steps=6, warmup_steps=2, log_every=1, eval_every=0,
                                eval_batches=4, sample_tokens=0, progress=False, seed=3, threads=1,
                                dtype="fp32", compile="off", attention="sdpa")
    base.update(changes)
    return PretrainConfig(**base)


def rows(run_dir: Path | str) -> list[dict[str, Any]]:
    return [json.loads(line) for line in (Path(run_dir) / "metrics.jsonl").read_text().splitlines()]


def losses(run_dir: Path | str) -> list[float]:
    """Training loss of every logged step, in order."""
    return [r["loss"] for r in rows(run_dir) if "loss" in r]


def cli_args(out: Path, *extra: str) -> list[str]:
    """`tinylm train` arguments equivalent to `config(out)`."""
    sets = [f"--set={k}={v}" for k, v in MICRO.items()]
    return ["train", "--data", str(data_dir()), "--out", str(out), *sets, "--batch-size", "4", "--seq-len", "16",
            "--warmup-steps", "2", "--log-every", "1", "--eval-every", "0", "--eval-batches", "4",
            "--sample-tokens", "0", "--no-progress", "--seed", "3", "--threads", "1", "--dtype", "fp32",
            "--compile", "off", "--attention", "sdpa", *extra]


def train_process(out: Path, *extra: str) -> subprocess.Popen:
    """`tinylm train` with `cli_args(out, *extra)` as a separate process (one thread), its stderr kept."""
    return subprocess.Popen([sys.executable, "-m", "tinylm", *cli_args(out, *extra)], stdout=subprocess.DEVNULL,
                            stderr=subprocess.PIPE, env={**os.environ, "OMP_NUM_THREADS": "1"})


def wait_for(condition: Callable[[], Any], seconds: float = 120.0, process: subprocess.Popen | None = None) -> None:
    """Poll until `condition()` holds; fail at the deadline, or at once (with its stderr) if `process` ended."""
    deadline = time.monotonic() + seconds
    while not condition():
        if process is not None and process.poll() is not None:
            raise AssertionError(f"the process ended: {process.stderr.read().decode() if process.stderr else ''}")
        assert time.monotonic() < deadline, "timed out"
        time.sleep(0.02)
