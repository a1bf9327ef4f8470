"""prepare_dataset end to end on small local corpora: contents, reuse, refusal, atomicity, bad input."""

from __future__ import annotations

import errno
import json
import os
import re
from pathlib import Path

import numpy as np
import pytest

from tinylm.cli.main import main
from tinylm.data.folders import default_data_dir
from tinylm.data.prepare import prepare_dataset
from tinylm.data.pystdlib import stdlib_files
from tinylm.data.sources import open_corpus
from tinylm.data.split import is_dev
from tinylm.errors import TinyLMError
from tinylm.tokenizer import load_tokenizer

OPTIONS = {"vocab_size": 512, "dev_fraction": 0.2, "context_length": 32, "progress": False}


@pytest.fixture(scope="module")
def corpus_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """About 300 KB of real text in 60 files (a slice of the stdlib), plus one odd file."""
    folder = tmp_path_factory.mktemp("corpus")
    for i, path in enumerate(stdlib_files()[:60]):
        text = path.read_text(encoding="utf-8")[:5000]
        (folder / f"{i:03d}_{path.stem}.py").write_text(text, encoding="utf-8")
    (folder / "odd.txt").write_bytes(b"emoji \xf0\x9f\x99\x82, Latin-1 caf\xe9, <|endoftext|> inside\r\n")
    return folder


def snapshot(folder: Path) -> dict[str, tuple[bytes, int]]:
    return {p.name: (p.read_bytes(), p.stat().st_mtime_ns) for p in sorted(folder.iterdir())}


def test_dataset_contents_match_the_corpus(corpus_dir: Path, tmp_path: Path) -> None:
    out = prepare_dataset(str(corpus_dir), out=tmp_path / "d", **OPTIONS)
    assert sorted(p.name for p in out.iterdir()) == ["dev.bin", "dev.json", "tokenizer.json", "train.bin",
                                                      "train.json"]
    tok = load_tokenizer(out)
    assert tok.n_vocab == 512 and tok.backend == "tiktoken"
    documents = list(open_corpus(str(corpus_dir)).documents())
    for split in ("train", "dev"):
        meta = json.loads((out / f"{split}.json").read_text())
        expected = [d for d in documents if is_dev(d.encode(), 0.2) == (split == "dev")]
        tokens = np.fromfile(out / f"{split}.bin", dtype=np.uint16)
        assert meta["dtype"] == "uint16" and meta["tokens"] == tokens.size
        assert (meta["split"], meta["corpus"], meta["tokenizer"]) == (split, str(corpus_dir), "bpe512")
        assert (meta["vocab_size"], meta["eot_id"], meta["documents"]) == (512, tok.eot_id, len(expected))
        assert meta["bytes"] == sum(len(d.encode()) for d in expected)
        assert meta["corpus_replaced_documents"] == 1 and len(meta["config_hash"]) == 16
        # the shard is each document's ordinary encoding followed by EOT, in corpus order
        assert tokens.tolist() == [i for d in expected for i in [*tok.encode_ordinary(d), tok.eot_id]]
        assert int((tokens == tok.eot_id).sum()) == len(expected)
    assert 0 < json.loads((out / "dev.json").read_text())["documents"] < len(documents)


def test_same_input_same_bytes(corpus_dir: Path, tmp_path: Path) -> None:
    a = prepare_dataset(str(corpus_dir), out=tmp_path / "a", **OPTIONS)
    b = prepare_dataset(str(corpus_dir), out=tmp_path / "b", **OPTIONS)
    for name in ("train.bin", "dev.bin", "tokenizer.json", "train.json", "dev.json"):
        assert (a / name).read_bytes() == (b / name).read_bytes(), name


def test_reuse_refuse_force(corpus_dir: Path, tmp_path: Path) -> None:
    out = prepare_dataset(str(corpus_dir), out=tmp_path / "d", **OPTIONS)
    before = snapshot(out)
    assert prepare_dataset(str(corpus_dir), out=out, **OPTIONS) == out
    assert snapshot(out) == before  # reused, not rewritten
    with pytest.raises(TinyLMError, match=r"prepared differently \(vocab_size 512 -> 600\).*--force"):
        prepare_dataset(str(corpus_dir), out=out, **{**OPTIONS, "vocab_size": 600})
    assert snapshot(out) == before
    prepare_dataset(str(corpus_dir), out=out, force=True, **{**OPTIONS, "vocab_size": 600})
    assert json.loads((out / "train.json").read_text())["vocab_size"] == 600
    assert not [p for p in out.iterdir() if p.name.startswith(".")]


def test_a_changed_corpus_is_not_reused(tmp_path: Path, corpus_dir: Path) -> None:
    corpus = tmp_path / "c"
    corpus.mkdir()
    for path in sorted(corpus_dir.iterdir())[:40]:
        (corpus / path.name).write_bytes(path.read_bytes())
    out = prepare_dataset(str(corpus), out=tmp_path / "d", **OPTIONS)
    (corpus / "new.txt").write_text("a new document " * 20)
    with pytest.raises(TinyLMError, match="the corpus content changed"):
        prepare_dataset(str(corpus), out=out, **OPTIONS)


def test_failure_midway_leaves_the_earlier_dataset(corpus_dir: Path, tmp_path: Path,
                                                   monkeypatch: pytest.MonkeyPatch) -> None:
    import tinylm.data.prepare as prepare_module

    out = prepare_dataset(str(corpus_dir), out=tmp_path / "d", **OPTIONS)
    before = snapshot(out)
    real = prepare_module.encode_corpus

    def crash(corpus, tokenizer, train, dev, *args, **kwargs):
        real(corpus, tokenizer, train, dev, *args, **kwargs)  # the temporary shards are fully written...
        raise KeyboardInterrupt  # ...then the user hits Ctrl-C

    monkeypatch.setattr(prepare_module, "encode_corpus", crash)
    with pytest.raises(KeyboardInterrupt):
        prepare_dataset(str(corpus_dir), out=out, force=True, **{**OPTIONS, "vocab_size": 600})
    assert snapshot(out) == before  # no temporary file left, nothing replaced
    with pytest.raises(KeyboardInterrupt):
        prepare_dataset(str(corpus_dir), out=tmp_path / "fresh", **OPTIONS)
    assert not (tmp_path / "fresh").exists()


def test_unwritable_output_is_a_one_line_error(corpus_dir: Path, tmp_path: Path,
                                               monkeypatch: pytest.MonkeyPatch) -> None:
    (tmp_path / "file").write_text("not a folder")
    with pytest.raises(TinyLMError, match="cannot create the output folder"):
        prepare_dataset(str(corpus_dir), out=tmp_path / "file" / "d", **OPTIONS)
    with pytest.raises(TinyLMError, match="exists and is not a folder"):
        prepare_dataset(str(corpus_dir), out=tmp_path / "file", **OPTIONS)

    def disk_full(self, docs, n_bytes):
        raise OSError(28, "No space left on device")

    monkeypatch.setattr("tinylm.data.staging.ShardWriter.add", disk_full)
    with pytest.raises(TinyLMError, match="cannot write the dataset to .*: No space left on device"):
        prepare_dataset(str(corpus_dir), out=tmp_path / "d", **OPTIONS)
    assert not (tmp_path / "d").exists()


@pytest.mark.parametrize("code", [errno.EROFS, errno.EACCES])
def test_read_only_output_is_one_line_and_leaves_nothing(code: int, corpus_dir: Path, tmp_path: Path,
                                                         monkeypatch: pytest.MonkeyPatch,
                                                         capsys: pytest.CaptureFixture[str]) -> None:
    """CI runs as root, where chmod cannot make a folder read-only: the file system calls fail instead."""
    reason = os.strerror(code)

    def refuse(*args: object, **kwargs: object) -> None:
        raise OSError(code, reason)

    args = ["prepare", "--corpus", str(corpus_dir), "--vocab-size", "512", "--dev-fraction", "0.2",
            "--context-length", "32", "--no-progress"]
    with monkeypatch.context() as patch:  # the output folder cannot be created
        patch.setattr(Path, "mkdir", refuse)
        assert main([*args, "--out", str(tmp_path / "a")]) == 1
    assert capsys.readouterr().err == f"tinylm: error: cannot create the output folder {tmp_path / 'a'}: {reason}\n"
    with monkeypatch.context() as patch:  # the folder exists, but nothing can be renamed into place
        patch.setattr(os, "replace", refuse)
        assert main([*args, "--out", str(tmp_path / "b")]) == 1
    err = capsys.readouterr().err
    assert err == f"tinylm: error: cannot write the dataset to {tmp_path / 'b'}: {reason}\n", err
    assert not (tmp_path / "a").exists() and not (tmp_path / "b").exists()  # no half-written folder left


def test_leftovers_of_an_interrupted_prepare_are_replaced(corpus_dir: Path, tmp_path: Path) -> None:
    out = tmp_path / "d"
    out.mkdir()
    (out / "train.bin").write_bytes(b"half written")
    (out / "tokenizer.json").write_text("{}")
    prepare_dataset(str(corpus_dir), out=out, **OPTIONS)  # no --force needed: nothing complete to protect
    assert load_tokenizer(out).n_vocab == 512


def test_default_folder_and_tokenizer_file(corpus_dir: Path, tmp_path: Path) -> None:
    out = prepare_dataset(str(corpus_dir), **OPTIONS)
    assert out == default_data_dir(str(corpus_dir), "bpe", 512)
    assert out.is_relative_to(Path(os.environ["TINYLM_HOME"]))  # conftest's private home, never the real one
    again = prepare_dataset(str(corpus_dir), tokenizer=str(out / "tokenizer.json"), out=tmp_path / "t",
                            **{k: v for k, v in OPTIONS.items() if k != "vocab_size"})
    assert (again / "train.bin").read_bytes() == (out / "train.bin").read_bytes()
    assert json.loads((again / "train.json").read_text())["config"]["tokenizer"] == "bpe512"


def test_hf_dataset_from_a_local_folder(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    datasets = pytest.importorskip("datasets")
    monkeypatch.setattr(datasets.config, "HF_DATASETS_CACHE", tmp_path / "hf-cache")
    folder = tmp_path / "ds"
    folder.mkdir()
    rows = [{"text": f"Once upon a time a number {i} liked {i * 7 % 13} cats."} for i in range(200)]
    (folder / "train.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    out = prepare_dataset(f"hf:{folder}", out=tmp_path / "d", **OPTIONS)
    train, dev = (json.loads((out / f"{s}.json").read_text()) for s in ("train", "dev"))
    assert train["documents"] + dev["documents"] == 200 and train["corpus"] == f"hf:{folder}::train"


def test_status_lines_only_with_progress(corpus_dir: Path, tmp_path: Path,
                                         capsys: pytest.CaptureFixture[str]) -> None:
    prepare_dataset(str(corpus_dir), out=tmp_path / "a", **OPTIONS)
    # without progress, only the note about the input remains (odd.txt holds a Latin-1 byte)
    assert capsys.readouterr().err == ("prepare: 1 document held bytes that are not UTF-8, replaced by U+FFFD: "
                                       "1 of 236,875 characters (under 0.01%)\n")
    prepare_dataset(str(corpus_dir), out=tmp_path / "b", **{**OPTIONS, "progress": True})
    err = capsys.readouterr().err
    assert "prepare: trained a 512-token BPE" in err and "\r" not in err  # no bar when stderr is not a TTY


# ---- bad input: one line on stderr, exit 1, the dataset already in --out untouched ------------------------
def _files(tmp_path: Path, spec: dict[str, bytes]) -> Path:
    folder = tmp_path / "bad"
    folder.mkdir(exist_ok=True)
    for name, data in spec.items():
        (folder / name).write_bytes(data)
    return folder


def _random_bytes(tmp_path: Path) -> list[str]:
    """A file of random bytes without NUL (so not refused as binary): nearly all of it is invalid UTF-8."""
    rng = np.random.default_rng(0)
    return [str(_files(tmp_path, {"noise.txt": rng.integers(1, 256, 50_000, dtype=np.uint8).tobytes()}))]


BAD_INPUTS = {
    "missing path": (lambda t, good: [str(t / "does-not-exist")], "corpus not found"),
    "empty corpus": (lambda t, good: [str(_files(t, {"a.txt": b"", "b.md": b""}))], "has no text"),
    "whitespace corpus": (lambda t, good: [str(_files(t, {"a.txt": b" \n\t\n", "b.txt": b"\r\n"}))],
                          "empty or whitespace"),
    "binary file": (lambda t, good: [str(_files(t, {"a.txt": b"text", "img.txt": b"\x89PNG\x00\x00"}))],
                    "binary file"),
    "too small": (lambda t, good: [str(_files(t, {f"{i}.txt": b"tiny %d" % i for i in range(30)})),
                                  "--dev-fraction", ".5", "--context-length", "256"],
                  r"too small: \d+ tokens, fewer than the two windows of 257"),
    "vocab below the minimum": (lambda t, good: [str(good), "--vocab-size", "200"], r"needs at least \d+"),
    "mostly invalid UTF-8": (lambda t, good: _random_bytes(t), r"mostly not UTF-8: \d+% .*--allow-invalid-utf8"),
    "negative document size": (lambda t, good: [str(good), "--max-document-chars", "-1"], "whole number"),
    "dev fraction out of range": (lambda t, good: [str(good), "--dev-fraction", "1.5"], "between 0 and 1"),
    "unknown tokenizer": (lambda t, good: [str(good), "--tokenizer", "bpe9"],
                          "not bpe, bpe-digits, r50k or an existing"),
    "vocab with a fixed tokenizer": (lambda t, good: [str(good), "--tokenizer", "r50k", "--vocab-size", "3"],
                                     "applies to --tokenizer bpe or bpe-digits only"),
    "unsupported file": (lambda t, good: [str(_files(t, {"table.csv": b"a,b"}) / "table.csv")],
                         "unsupported file type"),
    "bad hf spec": (lambda t, good: ["hf:"], "expected hf:NAME"),
    "offline hf dataset": (lambda t, good: ["hf:tinylm-tests/not-here"], "offline"),
}


@pytest.fixture(scope="module")
def earlier(corpus_dir: Path, tmp_path_factory: pytest.TempPathFactory) -> Path:
    return prepare_dataset(str(corpus_dir), out=tmp_path_factory.mktemp("earlier") / "d", **OPTIONS)


@pytest.mark.parametrize("case", BAD_INPUTS)
def test_bad_input(case: str, earlier: Path, corpus_dir: Path, tmp_path: Path,
                   capsys: pytest.CaptureFixture[str]) -> None:
    make_args, message = BAD_INPUTS[case]
    before = snapshot(earlier)
    args = make_args(tmp_path, corpus_dir)
    corpus, rest = args[0], args[1:]
    if "--vocab-size" not in rest and "--tokenizer" not in rest:
        rest += ["--vocab-size", "512"]
    if "--dev-fraction" not in rest:
        rest += ["--dev-fraction", "0.2"]
    rc = main(["prepare", "--corpus", corpus, "--out", str(earlier), "--force", "--context-length", "32",
               "--no-progress", *rest])
    err = capsys.readouterr().err
    assert rc == 1
    assert err.startswith("tinylm: error: ") and err.count("\n") == 1, err
    assert re.search(message, err), err
    assert snapshot(earlier) == before


def test_bpe_digits_spells_every_number_digit_by_digit(corpus_dir: Path, tmp_path: Path) -> None:
    out = prepare_dataset(str(corpus_dir), tokenizer="bpe-digits", **OPTIONS)
    assert out == default_data_dir(str(corpus_dir), "bpe-digits", 512) and out.name.endswith("-bpe512-digits")
    plain = prepare_dataset(str(corpus_dir), out=tmp_path / "plain", **OPTIONS)
    digits = load_tokenizer(out)
    assert digits.backend == "tiktoken" and digits.fallback_reason is None
    config = json.loads((out / "train.json").read_text())["config"]
    assert (config["tokenizer"], config["vocab_size"]) == ("bpe-digits", 512)
    assert json.loads((plain / "train.json").read_text())["config"]["tokenizer"] == "bpe"  # old hashes hold
    assert not any(sum(ch.isdigit() for ch in digits.decode([i])) > 1 for i in range(5, digits.n_vocab))
    pieces = [digits.decode([i]) for i in digits.encode(" 870 x870 (870)")]
    assert pieces.count("8") == pieces.count("7") == pieces.count("0") == 3
    assert main(["prepare", "--corpus", str(corpus_dir), "--tokenizer", "bpe-digits", "--vocab-size", "512",
                 "--dev-fraction", "0.2", "--context-length", "32", "--no-progress"]) == 0  # reused, same folder
