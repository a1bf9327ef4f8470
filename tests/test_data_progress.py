"""Progress without a terminal: a plain line every few seconds, so a log shows prepare is alive."""

from __future__ import annotations

import io
import re
import time
from pathlib import Path
from types import SimpleNamespace

import pytest

from tinylm.data.prepare import prepare_dataset
from tinylm.data.progress import Heartbeat, Progress
from tinylm.data.pystdlib import stdlib_files


class FakeClock:
    def __init__(self) -> None:
        self.now = 100.0

    def __call__(self) -> float:
        return self.now


def test_a_line_every_interval_when_not_a_terminal() -> None:
    clock, stream = FakeClock(), io.StringIO()
    with Progress("encode", 4_000_000, True, interval=5.0, clock=clock, stream=stream) as progress:
        for _ in range(8):  # 1 MB every 2 s
            clock.now += 2.0
            progress.update(1_000_000 // 2, tokens=125_000)
    # lines at 6, 12 s (5 s since the last one, checked at each update), never with a carriage return
    assert stream.getvalue().splitlines() == [
        "prepare: encode 1.5 MB of 4.0 MB (38%), 0.06M tok/s",
        "prepare: encode 3.0 MB of 4.0 MB (75%), 0.06M tok/s",
    ]


def test_bytes_per_second_when_no_tokens_are_counted_and_no_total() -> None:
    clock, stream = FakeClock(), io.StringIO()
    progress = Progress("read", None, True, interval=1.0, clock=clock, stream=stream)
    clock.now += 2.0
    progress.update(3_000_000)
    assert stream.getvalue() == "prepare: read 3.0 MB, 1.5 MB/s\n"


def test_nothing_when_disabled() -> None:
    clock, stream = FakeClock(), io.StringIO()
    progress = Progress("encode", 10, False, interval=0.0, clock=clock, stream=stream)
    clock.now += 60
    progress.update(10, tokens=3)
    assert stream.getvalue() == ""


def test_prepare_prints_progress_lines_without_a_tty(tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                                     capsys: pytest.CaptureFixture[str]) -> None:
    for i, path in enumerate(stdlib_files()[:30]):
        (tmp_path / f"{i:02d}.py").write_text(path.read_text(encoding="utf-8")[:4000], encoding="utf-8")
    clock = FakeClock()

    def one_second_per_look() -> float:
        clock.now += 1.0
        return clock.now

    monkeypatch.setattr("tinylm.data.progress.time", SimpleNamespace(monotonic=one_second_per_look))
    monkeypatch.setattr("tinylm.data.progress.LINE_SECONDS", 1.0)  # so every update is due
    prepare_dataset(str(tmp_path), out=tmp_path / "out", vocab_size=300, dev_fraction=0.2, context_length=16)
    err = capsys.readouterr().err
    assert "\r" not in err
    lines = err.splitlines()
    assert any(line.startswith("prepare: read ") and "MB of " in line for line in lines), err
    assert any(line.startswith("prepare: encode ") and "tok/s" in line for line in lines), err
    assert any(line.startswith("prepare: training a 300-token BPE on ") for line in lines), err


def test_a_heartbeat_while_a_step_without_counts_runs() -> None:
    stream = io.StringIO()
    with Heartbeat("training the BPE", True, interval=0.01, stream=stream):
        time.sleep(0.2)
    lines = stream.getvalue().splitlines()
    assert lines and all(re.fullmatch(r"prepare: training the BPE, \d+ s so far", line) for line in lines), lines
    quiet = io.StringIO()
    with Heartbeat("training the BPE", False, interval=0.01, stream=quiet):
        time.sleep(0.05)
    assert quiet.getvalue() == ""
