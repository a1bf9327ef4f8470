"""RUN/status.json: every training command says what its run is doing, and how it ended, in the run folder.

Each way a run can end is made to happen for real: its budget, a NaN, SIGINT, SIGTERM, an error with
its one line, and kill -9, which leaves "running" behind with a free lock, read back as "died".
"""

from __future__ import annotations

import json
import os
import signal
from pathlib import Path
from typing import Any

import pytest
import torch

from test_train_support import cli_args, hooked_build_model, rows, train_process, wait_for
from tinylm.cli.main import main
from tinylm.stages.pretrain import stage as pretrain_stage
from tinylm.train.run_status import STATUS_FILE, read_status, run_state

pytestmark = pytest.mark.usefixtures("one_thread")


def test_a_finished_run_says_finished_with_its_step_and_command(tmp_path: Path) -> None:
    assert main(cli_args(tmp_path, "--max-steps", "3")) == 0
    status = read_status(tmp_path)
    assert status["status"] == "finished" and run_state(tmp_path) == "finished"
    assert (status["step"], status["total_steps"], status["stage"]) == (3, 3, "pretrain")
    assert status["reason"] == "reached --max-steps 3" and status["pid"] == os.getpid()
    assert status["started"] <= status["updated"] and status["started"].endswith("Z")
    assert not list(tmp_path.glob(f".{STATUS_FILE}.tmp-*"))  # replaced atomically, nothing left over


def test_a_resumed_run_continues_its_status(tmp_path: Path) -> None:
    assert main(cli_args(tmp_path, "--max-steps", "2")) == 0
    assert main(cli_args(tmp_path, "--max-steps", "4", "--resume", "latest")) == 0
    assert (read_status(tmp_path)["status"], read_status(tmp_path)["step"]) == ("finished", 4)


def _hook(action):
    def hook(module: torch.nn.Module, args: Any, output: Any) -> Any:
        return action(output) if module.training else None
    return hook


def test_a_nan_loss_is_failed_with_the_reason(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(pretrain_stage, "build_model", hooked_build_model(_hook(lambda o: (o[0], o[1] * float("nan")))))
    assert main(cli_args(tmp_path, "--max-steps", "3")) == 1
    status = read_status(tmp_path)
    assert status["status"] == "failed" and "non-finite loss" in status["reason"]


@pytest.mark.parametrize("sig, expected", [(signal.SIGINT, "interrupted"), (signal.SIGTERM, "stopped")])
def test_a_signal_stops_the_run_and_the_status_names_it(sig: signal.Signals, expected: str, tmp_path: Path,
                                                        monkeypatch: pytest.MonkeyPatch) -> None:
    def send(output: Any) -> None:
        os.kill(os.getpid(), sig)

    monkeypatch.setattr(pretrain_stage, "build_model", hooked_build_model(_hook(send)))
    assert main(cli_args(tmp_path, "--max-steps", "3")) == 130
    status = read_status(tmp_path)
    assert (status["status"], status["step"]) == (expected, 1)
    assert "--resume latest" in status["reason"]


def test_an_error_mid_run_is_failed_with_the_line_the_command_printed(tmp_path: Path,
                                                                      monkeypatch: pytest.MonkeyPatch,
                                                                      capsys: pytest.CaptureFixture[str]) -> None:
    from tinylm.errors import TinyLMError

    def broken(output: Any) -> None:
        raise TinyLMError("the data ran dry at step 1 (a made-up failure)")

    monkeypatch.setattr(pretrain_stage, "build_model", hooked_build_model(_hook(broken)))
    assert main(cli_args(tmp_path, "--max-steps", "3")) == 1
    printed = capsys.readouterr().err.strip().splitlines()[-1]
    status = read_status(tmp_path)
    assert status["status"] == "failed" and status["reason"] in printed
    assert status["reason"] == "the data ran dry at step 1 (a made-up failure)"


def test_a_killed_run_still_says_running_and_reads_as_died(tmp_path: Path) -> None:
    """kill -9 cannot be answered: the file keeps "running", the lock is free, so the run is shown as died."""
    run = tmp_path / "run"
    proc = train_process(run, "--max-steps", "100000")
    seen_running = []
    try:
        def trained_three_steps() -> bool:
            status = read_status(run)
            if status and status["step"] >= 3 and (run / "metrics.jsonl").is_file() and rows(run):
                seen_running.append((status["status"], run_state(run)))
            return bool(seen_running)

        wait_for(trained_three_steps, process=proc)
        proc.send_signal(signal.SIGKILL)
    finally:
        proc.wait(timeout=30)
    assert seen_running == [("running", "running")]  # while it trains: its lock is held
    assert json.loads((run / STATUS_FILE).read_text())["status"] == "running"
    assert run_state(run) == "died"
