"""Following metrics.jsonl by byte offset: each read returns only the new complete lines."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from tinylm.studio import follow
from tinylm.studio.follow import read_after


def write(path: Path, text: str) -> None:
    with path.open("a", encoding="utf-8") as f:
        f.write(text)


def test_each_read_returns_only_new_complete_lines(tmp_path: Path) -> None:
    log = tmp_path / "metrics.jsonl"
    assert read_after(tmp_path, 0).rows == []  # no file yet
    write(log, json.dumps({"step": 1, "loss": 2.0}) + "\n" + '{"step": 2, "lo')
    first = read_after(tmp_path, 0)
    assert [r["step"] for r in first.rows] == [1] and first.offset == log.read_bytes().index(b"{", 1)
    write(log, 'ss": 1.5}\nnot json\n')
    second = read_after(tmp_path, first.offset, first.first_line)
    assert [r["step"] for r in second.rows] == [2]  # the half line, now whole
    assert second.damaged == ["line 3 (not JSON text)"]  # numbered as in the file
    assert read_after(tmp_path, second.offset).rows == [] and second.offset == log.stat().st_size


def test_a_rewritten_shorter_file_starts_over(tmp_path: Path) -> None:
    log = tmp_path / "metrics.jsonl"
    write(log, "".join(json.dumps({"step": s, "loss": 1.0}) + "\n" for s in range(1, 50)))
    end = read_after(tmp_path, 0).offset
    log.write_text(json.dumps({"step": 1, "loss": 1.0}) + "\n")  # what a resume's truncation leaves
    again = read_after(tmp_path, end)
    assert again.reset and [r["step"] for r in again.rows] == [1]


def test_a_watch_rereads_the_status_only_when_it_changes_and_sees_a_dead_run(tmp_path: Path,
                                                                              monkeypatch: pytest.MonkeyPatch) -> None:
    """The live stream's poll: status.json parsed again only when replaced; a "running" run whose lock is free
    turns "died" within LOCK_EVERY polls (here no process holds the lock: the writer is gone)."""
    reads = []
    monkeypatch.setattr(follow, "read_status", lambda run_dir: reads.append(1) or json.loads(
        (run_dir / "status.json").read_text()))
    status = tmp_path / "status.json"
    status.write_text(json.dumps({"status": "finished", "step": 3}))
    watch = follow.RunWatch(tmp_path)
    assert watch.poll(0, 1)[1] and watch.state == "finished"  # the first poll always reports
    for _ in range(5):
        assert not watch.poll(0, 1)[1]
    assert len(reads) == 1  # unchanged: never parsed again
    replacement = tmp_path / "status.tmp"
    replacement.write_text(json.dumps({"status": "running", "step": 4}))
    replacement.replace(status)  # as the run writes it: atomically
    assert watch.poll(0, 1)[1] and len(reads) == 2 and watch.state == "died"  # running, with its lock free
    write(tmp_path / "metrics.jsonl", json.dumps({"step": 1, "loss": 2.0}) + "\n")
    update, changed = watch.poll(0, 1)
    assert [r["step"] for r in update.rows] == [1] and not changed
