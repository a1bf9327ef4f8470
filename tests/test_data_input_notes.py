"""What prepare says about its input, and the corpus it refuses: mostly not UTF-8 (issue 11, item 5).

Before, a corpus of random bytes was "prepared" with exit 0, and replaced bytes and skipped files
were only counted in a sidecar. Now each is one line on stderr (even with --no-progress), and a
corpus more than 10% U+FFFD needs --allow-invalid-utf8.
"""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest

from tinylm.cli.main import main
from tinylm.data.pystdlib import stdlib_files

ARGS = ["--vocab-size", "300", "--context-length", "16", "--dev-fraction", "0.2", "--no-progress"]


def random_bytes(n: int, seed: int = 0) -> bytes:
    """Bytes 1..255 at random: no NUL (so not refused as binary), and almost never valid UTF-8."""
    return np.random.default_rng(seed).integers(1, 256, n, dtype=np.uint8).tobytes()


def test_a_corpus_of_random_bytes_is_refused_unless_allowed(tmp_path: Path,
                                                            capsys: pytest.CaptureFixture[str]) -> None:
    (tmp_path / "noise").mkdir()
    for i in range(40):  # enough files for the hash split, so nothing but the bytes can be the problem
        (tmp_path / "noise" / f"{i:02d}.txt").write_bytes(random_bytes(1000, seed=i))
    corpus = str(tmp_path / "noise")
    assert main(["prepare", "--corpus", corpus, "--out", str(tmp_path / "a"), *ARGS]) == 1
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "is mostly not UTF-8" in err and "--allow-invalid-utf8" in err, err
    assert not (tmp_path / "a").exists()
    assert main(["prepare", "--corpus", corpus, "--out", str(tmp_path / "b"), "--allow-invalid-utf8", *ARGS]) == 0
    err = capsys.readouterr().err
    assert "prepare: 40 documents held bytes that are not UTF-8, replaced by U+FFFD" in err, err
    train = json.loads((tmp_path / "b" / "train.json").read_text())
    assert train["corpus_replacement_characters"] > 0.3 * train["corpus_characters"]  # half the bytes are ASCII


def test_skipped_files_and_replaced_bytes_are_said_on_the_console(tmp_path: Path,
                                                                 capsys: pytest.CaptureFixture[str]) -> None:
    for i, path in enumerate(stdlib_files()[:20]):
        (tmp_path / f"{i:02d}.py").write_text(path.read_text(encoding="utf-8")[:3000], encoding="utf-8")
    (tmp_path / "latin1.txt").write_bytes("naïve café, déjà vu\n".encode("latin-1"))
    (tmp_path / "table.csv").write_text("a,b\n1,2\n")
    (tmp_path / "rows.csv").write_text("c,d\n")
    (tmp_path / "data.json").write_text("{}")
    assert main(["prepare", "--corpus", str(tmp_path), "--out", str(tmp_path / "out"), *ARGS]) == 0
    lines = capsys.readouterr().err.splitlines()
    assert lines[0] == ("prepare: skipped 3 files of other kinds (2 .csv, 1 .json); "
                        "tinylm reads .txt, .md, .py, .jsonl, .parquet")
    assert lines[1].startswith("prepare: 1 document held bytes that are not UTF-8, replaced by U+FFFD: 4 of ")
    train = json.loads((tmp_path / "out" / "train.json").read_text())
    assert train["corpus_skipped_files"] == 3 and train["corpus_replacement_characters"] == 4


@pytest.mark.parametrize(("invalid", "accepted"), [(100, True), (101, False)])
def test_the_line_is_ten_percent_of_the_characters(invalid: int, accepted: bool, tmp_path: Path,
                                                   capsys: pytest.CaptureFixture[str]) -> None:
    """900 ASCII characters plus `invalid` 0xFF bytes (each one U+FFFD): 100 of 1000 passes, 101 of 1001 not."""
    (tmp_path / "a.txt").write_bytes(b"plain words " * 75 + b"\xff" * invalid)
    rc = main(["prepare", "--corpus", str(tmp_path / "a.txt"), "--out", str(tmp_path / "o"), *ARGS])
    err = capsys.readouterr().err
    if accepted:
        assert rc == 0 and f"replaced by U+FFFD: {invalid} of 1,000 characters (10.00%)" in err, err
    else:
        assert rc == 1 and f"10% of its characters ({invalid} of 1,001)" in err, err
