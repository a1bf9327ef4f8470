"""The corpora people actually have: one big text file, a handful of files, three lines (issue 11, item 7).

One file is one document and the dev split is chosen per document, so before documents were cut
(`chunks.py`) and the tail fallback existed (`tail_split.py`) none of these could be prepared.
The reference for every shard is computed here from the documents with `encode_ordinary`.
"""

from __future__ import annotations

import json
import math
from pathlib import Path

import numpy as np
import pytest

from tinylm.cli.main import main
from tinylm.data.chunks import cut_document
from tinylm.data.prepare import prepare_dataset
from tinylm.data.pystdlib import stdlib_files
from tinylm.data.split import is_dev
from tinylm.errors import TinyLMError
from tinylm.tokenizer import load_tokenizer

EOT_TEXT = b"<|endoftext|>"


def stdlib_text(n_chars: int) -> str:
    """Real text no one here wrote: standard-library modules back to back, cut to about `n_chars`."""
    parts, size = [], 0
    for path in stdlib_files():
        text = path.read_text(encoding="utf-8")
        parts.append(text)
        size += len(text)
        if size >= n_chars:
            break
    return "".join(parts)[:n_chars]


def read_split(out: Path, split: str) -> tuple[np.ndarray, dict]:
    meta = json.loads((out / f"{split}.json").read_text())
    return np.fromfile(out / f"{split}.bin", dtype=meta["dtype"]), meta


def check_shards(out: Path, documents: list[str], dev_fraction: float, window: int) -> tuple[dict, dict]:
    """Both splits hold a window, and train + dev is every document's ids + EOT, hashed train ones first."""
    tok = load_tokenizer(out)
    (train, train_meta), (dev, dev_meta) = read_split(out, "train"), read_split(out, "dev")
    assert train.size >= window and dev.size >= window
    ordered = [d for d in documents if not is_dev(d.encode(), dev_fraction)]
    ordered += [d for d in documents if is_dev(d.encode(), dev_fraction)]
    expected = [i for d in ordered for i in [*tok.encode_ordinary(d), tok.eot_id]]
    assert np.concatenate([train, dev]).tolist() == expected
    for tokens, meta in ((train, train_meta), (dev, dev_meta)):
        text = tok.decode_bytes(tokens.tolist())  # independent of how prepare counted: the split's own text
        assert meta["tokens"] == tokens.size and meta["documents"] == text.count(EOT_TEXT)
        assert meta["bytes"] == len(text.replace(EOT_TEXT, b""))
    assert train_meta["bytes"] + dev_meta["bytes"] == sum(len(d.encode()) for d in documents)
    if dev_meta["dev_split"] == "tail":
        assert dev.size == max(window, math.ceil(dev_fraction * (train.size + dev.size)))
    return train_meta, dev_meta


def test_one_text_file_of_a_megabyte(tmp_path: Path) -> None:
    text = stdlib_text(1 << 20)
    (tmp_path / "book.txt").write_text(text, encoding="utf-8")
    options = {"vocab_size": 512, "context_length": 64, "progress": False}
    out = prepare_dataset(str(tmp_path / "book.txt"), out=tmp_path / "d", **options)  # default --dev-fraction 0.01
    chunks = cut_document(text)
    assert 16 < len(chunks) < 20 and "".join(chunks) == text
    assert all(len(c) <= 1 << 16 and c.endswith("\n") for c in chunks[:-1])  # cut after line breaks
    train, dev = check_shards(out, chunks, 0.01, 65)
    assert train["documents"] + dev["documents"] == len(chunks)
    # the cut is part of the config: another size is another dataset
    with pytest.raises(TinyLMError, match=r"max_document_chars 65536 -> 0\).*--force"):
        prepare_dataset(str(tmp_path / "book.txt"), out=out, max_document_chars=0, **options)


def test_a_folder_of_five_files_gets_a_dev_tail(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    documents = [path.read_text(encoding="utf-8")[:3000] for path in stdlib_files()[:40]]
    documents = [d for d in documents if d.strip() and not is_dev(d.encode(), 0.01)][:5]
    for i, text in enumerate(documents):
        (tmp_path / f"{i}.txt").write_text(text, encoding="utf-8")
    corpus = tmp_path / "?.txt"
    out = prepare_dataset(str(corpus), out=tmp_path / "a", vocab_size=512, context_length=64, progress=False)
    train, dev = check_shards(out, documents, 0.01, 65)
    assert dev["dev_split"] == train["dev_split"] == "tail"
    err = capsys.readouterr().err
    assert "held out 0 of 5 documents at --dev-fraction 0.01" in err
    assert f"the dev split is the last {dev['tokens']:,} tokens of the corpus instead" in err
    again = prepare_dataset(str(corpus), out=tmp_path / "b", vocab_size=512, context_length=64, progress=False)
    for name in ("train.bin", "dev.bin", "train.json", "dev.json", "tokenizer.json"):
        assert (out / name).read_bytes() == (again / name).read_bytes(), name


def test_every_document_hashed_into_dev(tmp_path: Path) -> None:
    """The BPE then learns from the held-out text (there is no other), and dev is the tail."""
    text = next(t for t in (f"story number {i}: a cat, a dog and a bird.\n" * 30 for i in range(50))
                if is_dev(t.encode(), 0.5))
    (tmp_path / "one.txt").write_text(text, encoding="utf-8")
    out = prepare_dataset(str(tmp_path / "one.txt"), out=tmp_path / "d", vocab_size=300, dev_fraction=0.5,
                          context_length=16, progress=False)
    train, dev = check_shards(out, [text], 0.5, 17)
    assert dev["dev_split"] == "tail" and train["documents"] == 0 and dev["documents"] == 1


def test_three_lines_work_or_say_why(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    (tmp_path / "notes.txt").write_text("The cat sat on the mat.\nThe dog ate my homework.\nA bird sang.\n")
    args = ["prepare", "--corpus", str(tmp_path / "notes.txt"), "--no-progress"]
    assert main([*args, "--out", str(tmp_path / "a")]) == 1  # default --context-length 256
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "is too small" in err and "fewer than the two windows of 257" in err, err
    assert not (tmp_path / "a").exists()
    assert main([*args, "--out", str(tmp_path / "b"), "--context-length", "8"]) == 0
    check_shards(tmp_path / "b", [(tmp_path / "notes.txt").read_text()], 0.01, 9)


def test_a_held_out_document_shorter_than_a_window_ends_the_dev_tail(tmp_path: Path) -> None:
    documents = [path.read_text(encoding="utf-8")[:3000] for path in stdlib_files()[:40]]
    documents = [d for d in documents if d.strip() and not is_dev(d.encode(), 0.2)][:4]
    short = next(t for t in (f"note {i}\n" for i in range(100)) if is_dev(t.encode(), 0.2))
    documents.append(short)
    for i, text in enumerate(documents):
        (tmp_path / f"{i}.txt").write_text(text, encoding="utf-8")
    out = prepare_dataset(str(tmp_path / "?.txt"), out=tmp_path / "d", vocab_size=512, dev_fraction=0.2,
                          context_length=64, progress=False)
    train, dev = check_shards(out, documents, 0.2, 65)
    assert dev["dev_split"] == "tail" and dev["documents"] >= 1  # the held-out note is still in dev, at its end
    tok = load_tokenizer(out)
    assert tok.decode(np.fromfile(out / "dev.bin", dtype=dev["dtype"]).tolist()).endswith(short + "<|endoftext|>")
