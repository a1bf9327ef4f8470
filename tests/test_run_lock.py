"""One run per folder: a second holder is refused by name, and the lock dies with its holder (kill -9 too)."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
from pathlib import Path

import pytest

from tinylm.errors import TinyLMError
from tinylm.train import run_lock
from tinylm.train.run_dir import choose_run_dir
from tinylm.train.run_lock import LOCK_FILE, RunLock, lock_holder

HOLD = "import sys, time; from tinylm.train.run_lock import RunLock; RunLock(sys.argv[1]).acquire(); " \
       "print('held', flush=True); time.sleep(float(sys.argv[2]))"


def holder(run: Path, seconds: float = 60) -> subprocess.Popen[str]:
    """Another process holding the run folder; returns once it holds it."""
    process = subprocess.Popen([sys.executable, "-c", HOLD, str(run), str(seconds)], stdout=subprocess.PIPE,
                               text=True)
    assert process.stdout is not None and process.stdout.readline() == "held\n"
    return process


def test_second_run_is_refused_naming_the_holder_until_kill_9_frees_it(tmp_path: Path) -> None:
    run = tmp_path / "run"
    other = holder(run)
    try:
        with pytest.raises(TinyLMError) as err:
            RunLock(run).acquire()
        message = str(err.value)
        assert message.startswith(f"run folder {run} is in use by pid {other.pid} on ") and "\n" not in message
        assert "-c" in message and "since 20" in message and "choose another --out" in message
        assert f"pid {other.pid}" in (lock_holder(run) or "")
    finally:
        other.send_signal(signal.SIGKILL)
        other.wait()
    lock = RunLock(run)
    note = lock.acquire()  # the kernel dropped the lock with the process; its record is stale
    assert note is not None and f"pid {other.pid}" in note and "ended without releasing it" in note
    assert json.loads((run / LOCK_FILE).read_text())["pid"] == os.getpid()
    lock.release()


def test_released_on_normal_end_and_on_exception(tmp_path: Path) -> None:
    run = tmp_path / "run"
    holder(run, seconds=0).wait()  # a process that ends without releasing: the kernel releases
    with RunLock(run) as lock:
        assert lock.held and lock.note is not None
        with pytest.raises(TinyLMError, match=f"in use by pid {os.getpid()}"):
            RunLock(run).acquire()  # a second hold in the same process is refused too
    assert (run / LOCK_FILE).read_text() == "" and lock_holder(run) is None  # a clean release leaves no record
    with pytest.raises(RuntimeError), RunLock(run):
        raise RuntimeError("the run failed")
    with RunLock(run) as again:
        assert again.note is None


def test_without_file_locks_the_run_still_starts_with_a_note(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(run_lock, "fcntl", None)
    with RunLock(tmp_path / "run") as lock:
        assert lock.held and "no file locks" in (lock.note or "")


def test_default_run_folder_skips_one_in_use(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(tmp_path)
    with RunLock(Path("runs/tiny-modern")):
        assert choose_run_dir(None, "tiny-modern", None) == Path("runs/tiny-modern-2")
    assert choose_run_dir(None, "tiny-modern", None) == Path("runs/tiny-modern")


def test_a_second_training_run_in_a_held_folder_is_refused(tmp_path: Path) -> None:
    from test_train_support import config
    from tinylm.stages.pretrain import pretrain

    run = tmp_path / "run"
    other = holder(run)
    try:
        with pytest.raises(TinyLMError, match=f"in use by pid {other.pid}"):
            pretrain(config(run, max_steps=1))
        assert not (run / "metrics.jsonl").exists() and not (run / "checkpoints").exists()
    finally:
        other.kill()
        other.wait()
    assert pretrain(config(run, max_steps=1)).steps == 1
    assert (run / ".lock").read_text() == ""
