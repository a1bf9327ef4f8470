"""`tinylm prepare` on the command line: the default dataset, reuse, and a light import."""

from __future__ import annotations

import subprocess
import sys
import time

import numpy as np
import pytest

from tinylm.cli.main import main
from tinylm.data.folders import default_data_dir
from tinylm.data.loader import BatchLoader
from tinylm.data.shards import check_data_dir
from tinylm.tokenizer import load_tokenizer


def test_no_arguments_prepares_the_default_dataset(capsys: pytest.CaptureFixture[str]) -> None:
    """The one test that tokenizes the whole standard library (a few seconds), as a first demo would."""
    assert main(["prepare", "--no-progress"]) == 0
    out = default_data_dir()
    assert str(out) in capsys.readouterr().out
    sidecars = check_data_dir(out, vocab_size=4096)
    train, dev = sidecars["train"], sidecars["dev"]
    assert (train["corpus"], train["tokenizer"], train["vocab_size"], train["dtype"]) == (
        "pystdlib", "bpe4096", 4096, "uint16")
    assert train["documents"] > 500 and dev["documents"] >= 1 and train["bytes"] > 5e6
    assert 2.5 < train["bytes"] / train["tokens"] < 6  # a 4096 BPE compresses Python ~3.5 bytes/token
    tok = load_tokenizer(out)
    tokens = np.fromfile(out / "dev.bin", dtype=np.uint16)
    text = tok.decode(tokens.tolist())
    assert text.count("<|endoftext|>") == dev["documents"] and len(text.encode()) >= dev["bytes"]
    x, y = BatchLoader(out, batch_size=2, seq_len=64).next_batch()
    assert int(x.max()) < 4096
    start = time.perf_counter()
    assert main(["prepare", "--no-progress"]) == 0  # the second run reuses the folder
    assert time.perf_counter() - start < 5


def test_command_module_imports_no_heavy_library() -> None:
    heavy = ("torch", "tokenizers", "tiktoken", "numpy", "datasets")
    code = f"import sys, tinylm.cli.commands.prepare; print(sorted(m for m in {heavy} if m in sys.modules))"
    result = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert result.stdout.strip() == "[]"


def test_help_lists_the_options(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit):
        main(["prepare", "--help"])
    help_text = capsys.readouterr().out
    for option in ("--corpus", "--tokenizer", "--vocab-size", "--out", "--force", "--dev-fraction",
                   "--text-field", "--max-document-chars", "--allow-invalid-utf8"):
        assert option in help_text
