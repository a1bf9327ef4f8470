"""Ctrl-C while a reward hangs: the first one ends the run at once with a checkpoint of the last finished step.

It used to be swallowed (the engine stops at a step boundary, which a hung reward never reaches), and
the second Ctrl-C ended the run without saving anything.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from test_rl import rl_args
from tinylm.checkpoint import list_checkpoints, load_train_state
from tinylm.cli.main import main
from tinylm.tasks.task import Example

pytestmark = pytest.mark.usefixtures("one_thread")

SLEEPY = '''
import pathlib
import time


def score(response, example):
    pathlib.Path(__file__).with_name("sleeping").touch()
    time.sleep(600)
    return 1.0
'''
CALLS = [0]


def interrupting_reward(response: str, example: Example) -> float:
    """Scores the first step's samples, then Ctrl-C arrives while the second step's first reward hangs."""
    CALLS[0] += 1
    if CALLS[0] == 2 * 3 + 1:  # batch 2 x G 3 samples a step
        os.kill(os.getpid(), signal.SIGINT)
        time.sleep(600)  # a daemon worker thread: abandoned, it cannot keep the process alive
    return float(len(response) % 2)


def test_ctrl_c_during_a_hung_reward_saves_the_last_step_and_exits_130(tmp_path: Path,
                                                                      capsys: pytest.CaptureFixture[str]) -> None:
    CALLS[0] = 0
    handler_before = signal.getsignal(signal.SIGINT)  # SIG_IGN when pytest runs as a background job
    start = time.monotonic()
    code = main(rl_args(tmp_path / "r", "grpo", "--reward", "test_rl_interrupt:interrupting_reward",
                        "--max-steps", "5"))
    assert code == 130 and time.monotonic() - start < 60
    (checkpoint,) = list_checkpoints(tmp_path / "r")
    assert load_train_state(checkpoint)["step"] == 1  # the step whose rewards never came was dropped
    assert "interrupted; state saved" in capsys.readouterr().err
    assert signal.getsignal(signal.SIGINT) is handler_before  # handler restored


def test_sigint_to_a_tinylm_rl_process_while_its_reward_sleeps(tmp_path: Path) -> None:
    """The real thing: a `tinylm rl` process, its reward a file in the working folder, one SIGINT."""
    (tmp_path / "sleepy.py").write_text(SLEEPY)
    args = rl_args(tmp_path / "run", "grpo", "--max-steps", "5", "--reward", "sleepy.py:score",
                   "--reward-timeout", "900")
    env = {**os.environ, "OMP_NUM_THREADS": "1", "PYTHONFAULTHANDLER": "1"}  # SIGABRT: every thread's stack
    process = subprocess.Popen([sys.executable, "-m", "tinylm", *args], cwd=tmp_path, env=env, text=True,
                               stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    try:
        deadline = time.monotonic() + 120
        while not (tmp_path / "sleeping").exists():
            assert process.poll() is None and time.monotonic() < deadline, process.communicate()
            time.sleep(0.1)
        process.send_signal(signal.SIGINT)
        sent = time.monotonic()
        try:
            out, err = process.communicate(timeout=60)
        except subprocess.TimeoutExpired:  # say where it waits: faulthandler prints each thread's stack on SIGABRT
            process.send_signal(signal.SIGABRT)
            stacks = process.communicate(timeout=30)[1]
            pytest.fail(f"no exit 60 s after SIGINT; the process's threads:\n{stacks[-6000:]}")
    finally:
        if process.poll() is None:
            process.kill()
    assert process.returncode == 130, err[-3000:]
    assert time.monotonic() - sent < 30  # a held-out evaluation and a checkpoint: seconds, not the 600 s sleep
    assert "interrupted; state saved" in err
    (checkpoint,) = list_checkpoints(tmp_path / "run")
    assert load_train_state(checkpoint)["step"] == 0
