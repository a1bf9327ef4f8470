"""The tokenizer: lossless byte-level BPE, tiktoken and `tokenizers` giving the same ids, save/load."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from tinylm.data.pystdlib import stdlib_files
from tinylm.errors import TinyLMError
from tinylm.tokenizer import Tokenizer, load_tokenizer, train_bpe
from tinylm.tokenizer.bytelevel import BYTE_TO_CHAR, bytes_to_token, token_to_bytes
from tinylm.tokenizer.chat_tokens import RESERVED_SPECIALS

EOT = "<|endoftext|>"
VARIED = [
    "def add(a, b):\n    return a + b\n",
    "  leading spaces and trailing   ",
    "café naïve 東京 Москва مرحبا 🙂👍🏽 e\u0301 ½",
    "tabs\tand\r\nwindows line ends\n\n\n   \n",
    "I'm sure they'll say we've 'quoted' \"it\" don't",
    "1234567890 3.14159 0xFFFF 1e-9",
    "\x00\x01\x07 control \x1b[31m ansi \u200b zero width",
    " " * 200 + "x" + "\n" * 50,
    "",
    f"two documents{EOT}joined by the special token",
    "<|system|>a chat<|end|><|user|>turn<|end|><|assistant|>with role tokens<|end|> <|end <|user",
    "🙂" * 30 + "ｆｕｌｌｗｉｄｔｈ" + "\U0001F468\u200d\U0001F469\u200d\U0001F467",
]


def stdlib_sample(n_bytes: int = 600_000) -> list[str]:
    texts, total = [], 0
    for path in stdlib_files():
        text = path.read_text(encoding="utf-8")
        texts.append(text)
        total += len(text)
        if total >= n_bytes:
            break
    return texts


@pytest.fixture(scope="module")
def bpe() -> Tokenizer:
    return train_bpe(stdlib_sample() + VARIED, vocab_size=1024)


@pytest.fixture(scope="module")
def hf(bpe: Tokenizer):
    from tokenizers import Tokenizer as HFTokenizer

    return HFTokenizer.from_str(bpe.to_json())


def test_byte_table_is_gpt2s() -> None:
    assert len(BYTE_TO_CHAR) == 256 and len(set(BYTE_TO_CHAR.values())) == 256
    assert BYTE_TO_CHAR[ord(" ")] == "Ġ" and BYTE_TO_CHAR[ord("\n")] == "Ċ" and BYTE_TO_CHAR[ord("A")] == "A"
    every_byte = bytes(range(256))
    assert token_to_bytes(bytes_to_token(every_byte)) == every_byte


def test_trained_bpe_shape(bpe: Tokenizer) -> None:
    spec = json.loads(bpe.to_json())
    assert bpe.n_vocab == bpe.vocab_size == 1024
    assert bpe.eot_id == spec["model"]["vocab"][EOT] == 0
    assert bpe.backend == "tiktoken" and bpe.fallback_reason is None
    assert bpe.name == "bpe1024"
    assert [t["content"] for t in spec["added_tokens"]] == list(RESERVED_SPECIALS)
    assert bpe.special_tokens == {token: i for i, token in enumerate(RESERVED_SPECIALS)}
    code = "def __init__(self):\n        return"
    assert len(bpe.encode(code)) < len(code) / 2  # it learned something about Python


@pytest.mark.parametrize("text", VARIED)
def test_round_trip_on_varied_text(bpe: Tokenizer, text: str) -> None:
    assert bpe.decode(bpe.encode(text)) == text
    assert bpe.decode(bpe.encode_ordinary(text)) == text


@pytest.mark.parametrize("text", VARIED + stdlib_sample(200_000)[-5:])
def test_tiktoken_ids_equal_tokenizers_ids(bpe: Tokenizer, hf, text: str) -> None:
    assert bpe.encode(text) == hf.encode(text, add_special_tokens=False).ids
    hf.encode_special_tokens = True
    try:
        assert bpe.encode_ordinary(text) == hf.encode(text, add_special_tokens=False).ids
    finally:
        hf.encode_special_tokens = False


unicode_text = st.text(alphabet=st.characters(blacklist_categories=("Cs",)), max_size=200)
PIECES = ["🙂", "👍🏽", "e\u0301", "\u0301\u0302", "\x00", "\x1f", "\x7f", "\r\n", "\t", " " * 17, "\n" * 9,
          "\u00a0", "\u3000", "東京", "'s", "'ll", EOT, "Ġ", "\ufffd", *RESERVED_SPECIALS[1:], "<|", "|>"]
tricky = st.lists(st.sampled_from(PIECES), max_size=30).map("".join)


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(st.one_of(unicode_text, tricky, st.tuples(unicode_text, tricky).map("".join)))
def test_lossless_and_identical_ids_for_arbitrary_unicode(bpe: Tokenizer, hf, text: str) -> None:
    ids = bpe.encode(text)
    assert bpe.decode(ids) == text
    assert bpe.decode(bpe.encode_ordinary(text)) == text
    assert b"".join(bpe.token_bytes(i) for i in ids) == text.encode("utf-8")
    assert ids == hf.encode(text, add_special_tokens=False).ids


def test_special_token_text(bpe: Tokenizer) -> None:
    text = f"a{EOT}b"
    assert bpe.eot_id in bpe.encode(text)
    assert bpe.eot_id not in bpe.encode_ordinary(text)
    assert bpe.decode(bpe.encode_ordinary(text)) == text
    assert bpe.encode_batch([text, "x"]) == [bpe.encode(text), bpe.encode("x")]
    assert bpe.encode_ordinary_batch([text, "x"]) == [bpe.encode_ordinary(text), bpe.encode_ordinary("x")]
    arrays = bpe.encode_arrays([text, "x", ""])
    assert [a.tolist() for a in arrays] == bpe.encode_ordinary_batch([text, "x", ""])


def test_token_bytes_let_a_stream_decode_split_characters(bpe: Tokenizer) -> None:
    text = "🙂東京" * 3
    ids = bpe.encode(text)
    pieces = [bpe.token_bytes(i) for i in ids]
    assert any(piece and not _is_utf8(piece) for piece in pieces), "expected a character split across tokens"
    decoder, out = __import__("codecs").getincrementaldecoder("utf-8")(), ""
    for piece in pieces:
        out += decoder.decode(piece)
    assert out == text
    assert bpe.token_bytes(bpe.eot_id) == EOT.encode()


def _is_utf8(data: bytes) -> bool:
    try:
        data.decode("utf-8")
    except UnicodeDecodeError:
        return False
    return True


def test_lone_surrogates_become_replacement_characters(bpe: Tokenizer) -> None:
    assert bpe.decode(bpe.encode("a\ud800b")) == "a\ufffdb"
    assert bpe.encode("a\ud800b") == bpe.encode("a\ufffdb")
    assert [a.tolist() for a in bpe.encode_arrays(["a\udfffb"])] == [bpe.encode("a\ufffdb")]


def test_padding_ids_decode_to_nothing_and_negative_ids_fail(bpe: Tokenizer) -> None:
    assert bpe.token_bytes(bpe.n_vocab + 5) == b""
    assert bpe.decode([*bpe.encode("hi"), bpe.n_vocab + 3, *bpe.encode(" there")]) == "hi there"
    with pytest.raises(ValueError, match="negative"):
        bpe.decode([-1])


def test_save_and_load_round_trip(bpe: Tokenizer, tmp_path: Path) -> None:
    file = bpe.save(tmp_path / "tok.json")
    assert file == tmp_path / "tok.json" and file.read_text() == bpe.to_json()
    (tmp_path / "dir").mkdir()
    assert bpe.save(tmp_path / "dir") == tmp_path / "dir" / "tokenizer.json"
    assert not list(tmp_path.glob(".*tmp*")) and not list((tmp_path / "dir").glob(".*tmp*"))
    for source in (file, tmp_path / "dir", str(file)):
        loaded = load_tokenizer(source)
        assert loaded.fingerprint == bpe.fingerprint and loaded.backend == "tiktoken"
        assert (loaded.eot_id, loaded.vocab_size, loaded.name) == (bpe.eot_id, bpe.vocab_size, bpe.name)
        assert [loaded.encode(t) for t in VARIED] == [bpe.encode(t) for t in VARIED]


def test_train_is_deterministic() -> None:
    texts = stdlib_sample(150_000)
    assert train_bpe(texts, 600).to_json() == train_bpe(texts, 600).to_json()


def test_small_corpus_gives_fewer_tokens_than_asked() -> None:
    tok = train_bpe(["abab abab abab"], vocab_size=4096)
    assert 266 < tok.n_vocab < 300 and tok.vocab_size == tok.n_vocab
    assert tok.decode(tok.encode("abab xyz")) == "abab xyz"


@pytest.mark.parametrize("size", [0, 100, 256, 260])
def test_vocab_too_small(size: int) -> None:
    with pytest.raises(TinyLMError, match="at least 266"):
        train_bpe(["some text"], vocab_size=size)


def _hf_file(tmp_path: Path, normalizer: bool = False, vocab_size: int = 300) -> Path:
    """A byte-level BPE built directly with `tokenizers`, as another project (or test_export) would."""
    from tokenizers import Tokenizer as HFTokenizer
    from tokenizers import decoders, models, normalizers, pre_tokenizers, trainers

    tok = HFTokenizer(models.BPE())
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tok.decoder = decoders.ByteLevel()
    if normalizer:
        tok.normalizer = normalizers.Lowercase()
    trainer = trainers.BpeTrainer(vocab_size=vocab_size, special_tokens=[EOT],
                                  initial_alphabet=pre_tokenizers.ByteLevel.alphabet(), show_progress=False)
    tok.train_from_iterator(stdlib_sample(50_000), trainer)
    path = tmp_path / "tokenizer.json"
    tok.save(str(path))
    return path


def test_foreign_byte_level_bpe_runs_on_tiktoken(tmp_path: Path) -> None:
    from tokenizers import Tokenizer as HFTokenizer

    path = _hf_file(tmp_path)
    ours, theirs = load_tokenizer(path), HFTokenizer.from_file(str(path))
    assert ours.backend == "tiktoken"
    for text in VARIED:
        assert ours.encode(text) == theirs.encode(text, add_special_tokens=False).ids


def test_tokenizer_tiktoken_cannot_run_falls_back_to_tokenizers(tmp_path: Path) -> None:
    from tokenizers import Tokenizer as HFTokenizer

    path = _hf_file(tmp_path, normalizer=True)
    ours, theirs = load_tokenizer(path), HFTokenizer.from_file(str(path))
    assert ours.backend == "tokenizers" and "normalizer" in ours.fallback_reason
    for text in VARIED:
        ids = ours.encode(text)
        assert ids == theirs.encode(text, add_special_tokens=False).ids
        assert ours.decode(ids) == text.lower()
    assert ours.encode_batch(VARIED) == [ours.encode(t) for t in VARIED]
    assert ours.encode("a\ud800b") == ours.encode("a\ufffdb")
    assert ours.eot_id not in ours.encode_ordinary(f"x{EOT}y") and ours.eot_id in ours.encode(f"x{EOT}y")
    assert [a.tolist() for a in ours.encode_arrays(["ab", "c"])] == ours.encode_ordinary_batch(["ab", "c"])
    assert ours.token_bytes(ours.encode(" the")[0]).startswith(b" ")


def test_mismatched_merge_order_is_detected(tmp_path: Path) -> None:
    spec = json.loads(_hf_file(tmp_path).read_text())
    merges = spec["model"]["merges"]
    merges[0], merges[-1] = merges[-1], merges[0]  # ids no longer follow merge order
    file = tmp_path / "swapped.json"
    file.write_text(json.dumps(spec))
    tok = load_tokenizer(file)
    assert tok.backend == "tokenizers" and "merge order" in tok.fallback_reason


def test_load_errors(tmp_path: Path) -> None:
    with pytest.raises(TinyLMError, match="not found"):
        load_tokenizer(tmp_path / "missing.json")
    with pytest.raises(TinyLMError, match="not found"):
        load_tokenizer(tmp_path)  # a folder without tokenizer.json
    (tmp_path / "bad.json").write_text("{not json")
    with pytest.raises(TinyLMError, match="not a tokenizer file"):
        load_tokenizer(tmp_path / "bad.json")
    (tmp_path / "other.json").write_text('{"hello": 1}')
    with pytest.raises(TinyLMError, match="not a Hugging Face tokenizer.json"):
        load_tokenizer(tmp_path / "other.json")
    spec = json.loads(_hf_file(tmp_path).read_text())
    spec["added_tokens"] = []
    (tmp_path / "no_eot.json").write_text(json.dumps(spec))
    with pytest.raises(TinyLMError, match="no end-of-text"):
        load_tokenizer(tmp_path / "no_eot.json")
