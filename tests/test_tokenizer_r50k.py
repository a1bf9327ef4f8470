"""r50k through tiktoken: found only locally, never downloaded, one clear line when missing."""

from __future__ import annotations

import base64
import hashlib
import json
from pathlib import Path

import pytest

from tinylm.cli.main import main
from tinylm.errors import TinyLMError
from tinylm.tokenizer import load_tokenizer
from tinylm.tokenizer.r50k import (
    MARKER_KEY,
    R50K_URL,
    candidate_files,
    find_r50k_file,
    load_r50k,
    parse_tiktoken_file,
)


def _real_r50k_file() -> Path | None:
    """The genuine encoding file if this machine has it somewhere tinylm looks (never downloaded)."""
    return next((p for p in candidate_files() if p.is_file()), None)


def _fake_encoding(path: Path) -> Path:
    """A tiny encoding in tiktoken's file format: the 256 bytes, then a few merges."""
    tokens = [bytes([b]) for b in range(256)] + [b"he", b"ll", b"hell", b"hello", b" w", b" wor"]
    lines = (base64.b64encode(token) + b" " + str(rank).encode() + b"\n" for rank, token in enumerate(tokens))
    path.write_bytes(b"".join(lines))
    return path


def test_offline_without_the_file_fails_with_one_line(tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                                      capsys: pytest.CaptureFixture[str]) -> None:
    monkeypatch.setenv("TIKTOKEN_CACHE_DIR", str(tmp_path / "empty-cache"))
    with pytest.raises(TinyLMError, match="never downloads") as info:
        find_r50k_file()
    assert "\n" not in str(info.value) and "TIKTOKEN_CACHE_DIR" in str(info.value)
    assert main(["prepare", "--tokenizer", "r50k", "--corpus", str(tmp_path), "--no-progress"]) == 1
    err = capsys.readouterr().err
    assert err.startswith("tinylm: error: ") and err.count("\n") == 1 and "Traceback" not in err


def test_lookup_follows_tiktokens_cache_then_tinylm_home(tmp_path: Path,
                                                          monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("TIKTOKEN_CACHE_DIR", str(tmp_path / "cache"))
    monkeypatch.setenv("TINYLM_HOME", str(tmp_path / "home"))
    key = hashlib.sha1(R50K_URL.encode()).hexdigest()
    placed = tmp_path / "home" / "tiktoken" / "r50k_base.tiktoken"
    assert candidate_files() == [tmp_path / "cache" / key, placed]
    placed.parent.mkdir(parents=True)
    _fake_encoding(placed)
    assert find_r50k_file() == placed
    with pytest.raises(TinyLMError, match="sha256 mismatch"):  # a wrong file is not silently used
        load_r50k()


def test_encoding_built_from_a_tiktoken_file(tmp_path: Path) -> None:
    tok = load_r50k(_fake_encoding(tmp_path / "fake.tiktoken"), verify=False)
    assert tok.n_vocab == 263 and tok.eot_id == 262 and tok.vocab_size == 320  # padded to a multiple of 64
    assert tok.encode("hello world") == [259, 260, 111, 114, 108, 100]  # " wo" is no token
    assert tok.decode(tok.encode("hello world<|endoftext|>")) == "hello world<|endoftext|>"
    assert tok.encode("<|endoftext|>") == [262]
    assert tok.token_bytes(300) == b""  # a padding id


def test_saved_as_a_marker_that_loads_r50k_again(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("TIKTOKEN_CACHE_DIR", str(tmp_path / "empty-cache"))
    tok = load_r50k(_fake_encoding(tmp_path / "fake.tiktoken"), verify=False)
    saved = tok.save(tmp_path / "ckpt" / "tokenizer.json")
    assert json.loads(saved.read_text())[MARKER_KEY] == "r50k_base"
    with pytest.raises(TinyLMError, match="never downloads"):  # the marker asks for the real encoding
        load_tokenizer(tmp_path / "ckpt")


def test_parse_errors_name_the_line(tmp_path: Path) -> None:
    with pytest.raises(TinyLMError, match=r"f:2: not a tiktoken"):
        parse_tiktoken_file(b"YQ== 0\nnot-base64!! x\n", "f")


def test_marker_names_only_r50k(tmp_path: Path) -> None:
    (tmp_path / "tokenizer.json").write_text(json.dumps({MARKER_KEY: "cl100k_base"}))
    with pytest.raises(TinyLMError, match="cl100k_base"):
        load_tokenizer(tmp_path)


def test_real_r50k_if_present(tmp_path: Path) -> None:
    if _real_r50k_file() is None:
        pytest.skip("r50k_base.tiktoken is not on this machine (tinylm never downloads it)")
    tok = load_r50k()
    assert (tok.n_vocab, tok.vocab_size, tok.eot_id, tok.name) == (50257, 50304, 50256, "r50k_base")
    assert tok.encode("hello world") == [31373, 995]
    assert tok.encode("<|endoftext|>") == [50256]
    saved = tok.save(tmp_path)
    assert json.loads(saved.read_text())[MARKER_KEY] == "r50k_base"
    again = load_tokenizer(tmp_path)
    assert again.encode("The quick brown fox") == tok.encode("The quick brown fox")
    assert again.vocab_size == 50304
