"""Following metrics.jsonl by byte offset: each read returns only the new complete lines."""

from __future__ import annotations

import json
from pathlib import Path

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
