"""Faults under torchrun: a rank killed mid-run makes the group restart (--max-restarts) and resume from the
last checkpoint with the losses of a run that was never interrupted; a hung peer fails the run after
--dist-timeout with one line naming it, instead of an endless wait."""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import sys
from pathlib import Path

import pytest

from test_train_support import cli_args, losses, rows, wait_for
from tinylm.checkpoint import list_checkpoints
from tinylm.train.run_status import read_status

STEPS, EVERY = 40, 20


def torchrun_process(*args: str, restarts: int = 0) -> subprocess.Popen:
    env = {k: v for k, v in os.environ.items() if k not in ("RANK", "WORLD_SIZE", "LOCAL_RANK", "MASTER_ADDR",
                                                               "MASTER_PORT")}
    env["OMP_NUM_THREADS"] = "1"
    return subprocess.Popen([sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc-per-node=2",
                             f"--max-restarts={restarts}", "-m", "tinylm", *args], stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True, env=env, start_new_session=True)


def kill_group(proc: subprocess.Popen) -> None:
    """torchrun and its workers: killing torchrun alone would leave the workers training on."""
    with contextlib.suppress(ProcessLookupError):
        os.killpg(proc.pid, signal.SIGKILL)
    proc.wait()


def other_worker(launcher: int, rank0: int) -> int:
    """The pid of torchrun's worker that is not rank 0 (torchrun's children are its workers)."""
    children = Path(f"/proc/{launcher}/task/{launcher}/children").read_text().split()
    (pid,) = [int(c) for c in children if int(c) != rank0]
    return pid


def run_args(out: Path, *extra: str) -> list[str]:
    args = cli_args(out, "--batch-size", "2", "--max-steps", str(STEPS), "--schedule-steps", str(STEPS),
                    "--checkpoint-every", str(EVERY), *extra)
    args[args.index("--threads") + 1] = "1"
    return args


@pytest.mark.slow  # ~18 s: a torchrun group killed and restarted
def test_a_killed_rank_restarts_the_group_which_resumes_exactly(tmp_path: Path) -> None:
    straight = torchrun_process(*run_args(tmp_path / "straight"))
    assert straight.wait(timeout=240) == 0, straight.stderr.read()[-3000:]

    run = tmp_path / "faulty"
    proc = torchrun_process(*run_args(run, "--resume", "latest"), restarts=1)  # latest: nothing yet, then the last
    try:
        wait_for(lambda: (s := read_status(run)) is not None and s["step"] >= EVERY + 2, process=proc)
        status = read_status(run)
        os.kill(other_worker(status["launcher_pid"], status["pid"]), signal.SIGKILL)  # rank 1, between checkpoints
        _, err = proc.communicate(timeout=240)
    finally:
        if proc.poll() is None:
            kill_group(proc)
    assert proc.returncode == 0, err[-3000:]
    assert "resumed from" in err and f"step_{EVERY:08d}" in err  # the restarted group continued the checkpoint
    assert [r["step"] for r in rows(run) if "loss" in r] == list(range(1, STEPS + 1))  # every step once
    assert losses(run) == losses(tmp_path / "straight")  # bit for bit
    assert [c.name for c in list_checkpoints(run)][-1] == f"step_{STEPS:08d}"


@pytest.mark.slow
def test_a_hung_peer_fails_the_run_with_one_line_naming_it(tmp_path: Path) -> None:
    run = tmp_path / "hung"
    proc = torchrun_process(*run_args(run, "--max-steps", "100000", "--dist-timeout", "4"))
    stopped = None
    try:
        wait_for(lambda: (s := read_status(run)) is not None and s["step"] >= 3, process=proc)
        status = read_status(run)
        stopped = other_worker(status["launcher_pid"], status["pid"])
        os.kill(stopped, signal.SIGSTOP)  # rank 1 hangs: alive, holding its sockets, answering nothing
        wait_for(lambda: not Path(f"/proc/{status['pid']}").exists(), seconds=60)  # rank 0 gave up, and said why
        os.kill(stopped, signal.SIGKILL)  # (torchrun would wait 30 s for a stopped process to take its SIGTERM)
        _, err = proc.communicate(timeout=120)
    finally:
        if stopped is not None:
            with contextlib.suppress(ProcessLookupError):  # torchrun may have killed it already
                os.kill(stopped, signal.SIGKILL)
        if proc.poll() is None:
            kill_group(proc)
    assert proc.returncode != 0
    lines = [line for line in err.splitlines() if line.startswith("tinylm: error:")]
    assert lines and "the other ranks gave no answer within 4 s (--dist-timeout)" in lines[0], err[-3000:]
    assert "rank 1 hung or died" in lines[0] and "[rank 0/2]" in lines[0]
    assert "rank 1 hung or died" in read_status(run)["reason"]
