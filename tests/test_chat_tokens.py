"""Chat tokens: reserved in every new BPE, appended to tokenizers without them, saved and loaded, on tiktoken."""

from __future__ import annotations

import base64
import hashlib
import json
from pathlib import Path

import pytest

from tinylm.errors import TinyLMError
from tinylm.tokenizer import Tokenizer, load_tokenizer, r50k, train_bpe
from tinylm.tokenizer.chat_tokens import CHAT_TOKENS, RESERVED_SPECIALS, missing_chat_tokens, with_chat_tokens
from tinylm.tokenizer.r50k import ADDED_KEY, MARKER_KEY, R50K_URL, load_r50k

EOT = "<|endoftext|>"
TEXTS = ["Hello there! How are you? I am fine, thank you.\n" * 30, "def add(a, b):\n    return a + b\n" * 30,
         "東京 Москва café 🙂 naïve " * 30]
CHAT = f"{EOT}<|system|>Be brief.<|end|><|user|>Hi there<|end|><|assistant|>Hello!<|end|>"


def _hf_ids(tokenizer_json: str, text: str) -> list[int]:
    """The reference: Hugging Face `tokenizers` running the same file."""
    from tokenizers import Tokenizer as HFTokenizer

    return HFTokenizer.from_str(tokenizer_json).encode(text, add_special_tokens=False).ids


def _old_bpe() -> Tokenizer:
    """A byte-level BPE from before the chat tokens: its only special token is <|endoftext|>."""
    from tokenizers import Tokenizer as HFTokenizer
    from tokenizers import decoders, models, pre_tokenizers, trainers

    from tinylm.tokenizer.hf_json import tokenizer_from_hf_json

    hf = HFTokenizer(models.BPE())
    hf.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    hf.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(vocab_size=320, special_tokens=[EOT], show_progress=False,
                                  initial_alphabet=pre_tokenizers.ByteLevel.alphabet())
    hf.train_from_iterator(TEXTS, trainer)
    return tokenizer_from_hf_json(hf.to_str())


def test_new_bpe_reserves_the_chat_tokens_and_stays_on_tiktoken() -> None:
    tok = train_bpe(TEXTS, vocab_size=300)
    assert tok.special_tokens == {token: i for i, token in enumerate(RESERVED_SPECIALS)}
    assert tok.n_vocab == 300 and tok.backend == "tiktoken" and missing_chat_tokens(tok) == []
    ids = tok.encode(CHAT)
    assert ids == _hf_ids(tok.to_json(), CHAT)
    assert [i for i in ids if i < len(RESERVED_SPECIALS)] == [0, 1, 4, 2, 4, 3, 4]
    assert tok.encode("<|user|>") == [tok.token_to_id("<|user|>")] == [2]
    assert 2 not in tok.encode_ordinary("<|user|>") and tok.decode(tok.encode_ordinary(CHAT)) == CHAT
    assert tok.decode(ids) == CHAT
    assert with_chat_tokens(tok) == (tok, [])


def test_token_to_id() -> None:
    tok = train_bpe(TEXTS, vocab_size=400)
    hello = tok.encode_ordinary("Hello")
    assert len(hello) == 1 and tok.token_to_id("Hello") == hello[0]
    assert tok.token_to_id("Hello there") is None and tok.token_to_id("") is None
    assert tok.token_to_id(EOT) == tok.eot_id


def test_an_older_bpe_gets_them_appended_and_keeps_every_old_id(tmp_path: Path) -> None:
    old = _old_bpe()
    assert missing_chat_tokens(old) == list(CHAT_TOKENS)
    new, added = with_chat_tokens(old)
    assert added == list(CHAT_TOKENS) and new.backend == "tiktoken"
    assert {t: new.token_to_id(t) for t in added} == {t: old.n_vocab + i for i, t in enumerate(added)}
    assert new.n_vocab == new.vocab_size == old.n_vocab + len(CHAT_TOKENS) and new.eot_id == old.eot_id
    for text in TEXTS + [CHAT]:
        assert new.encode_ordinary(text) == old.encode_ordinary(text)
    assert new.encode(CHAT) == _hf_ids(new.to_json(), CHAT)
    assert new.encode("<|assistant|>") == [old.n_vocab + 2]
    loaded = load_tokenizer(new.save(tmp_path))
    assert loaded.fingerprint == new.fingerprint and loaded.special_tokens == new.special_tokens
    assert loaded.backend == "tiktoken" and loaded.encode(CHAT) == new.encode(CHAT)
    assert with_chat_tokens(loaded)[1] == []


def test_an_ordinary_token_spelled_like_a_chat_token_is_refused() -> None:
    """A foreign tokenizer whose "<|end|>" is a plain (non-special) added token: making it special would change ids."""
    from tinylm.tokenizer.hf_json import tokenizer_from_hf_json

    old = _old_bpe()
    spec = json.loads(old.to_json())
    spec["added_tokens"].append({"id": old.n_vocab, "content": "<|end|>", "single_word": False, "lstrip": False,
                                 "rstrip": False, "normalized": False, "special": False})
    tok = tokenizer_from_hf_json(json.dumps(spec))
    assert tok.token_to_id("<|end|>") == old.n_vocab and tok.backend == "tokenizers"
    with pytest.raises(TinyLMError, match="as an ordinary token"):
        with_chat_tokens(tok)


def _fake_r50k(folder: Path) -> Path:
    """A tiny encoding in tiktoken's format, placed where tinylm looks for r50k (tiktoken's cache)."""
    tokens = [bytes([b]) for b in range(256)] + [b"he", b"ll", b"hell", b"hello", b" w", b" wor"]
    folder.mkdir(parents=True, exist_ok=True)
    file = folder / hashlib.sha1(R50K_URL.encode()).hexdigest()
    file.write_bytes(b"".join(base64.b64encode(t) + b" %d\n" % i for i, t in enumerate(tokens)))
    return file


def test_r50k_gets_them_after_eot_in_its_padding_and_saves_them(tmp_path: Path,
                                                                monkeypatch: pytest.MonkeyPatch) -> None:
    file = _fake_r50k(tmp_path / "cache")
    monkeypatch.setenv("TIKTOKEN_CACHE_DIR", str(tmp_path / "cache"))
    monkeypatch.setattr(r50k, "R50K_SHA256", hashlib.sha256(file.read_bytes()).hexdigest())
    old = load_r50k()
    new, added = with_chat_tokens(old)
    assert added == list(CHAT_TOKENS) and new.backend == "tiktoken"
    assert [new.token_to_id(t) for t in added] == list(range(263, 263 + len(CHAT_TOKENS)))  # after EOT = 262
    assert (new.n_vocab, new.vocab_size) == (263 + len(CHAT_TOKENS), old.vocab_size)  # padded rows hold them
    assert new.encode(CHAT) == [262, 263, *old.encode_ordinary("Be brief."), 266, 264, *old.encode_ordinary("Hi there"),
                                266, 265, *old.encode_ordinary("Hello!"), 266]
    saved = new.save(tmp_path / "ckpt")
    assert json.loads(saved.read_text())[ADDED_KEY] == {t: 263 + i for i, t in enumerate(CHAT_TOKENS)}
    loaded = load_tokenizer(saved)
    assert loaded.fingerprint == new.fingerprint and loaded.encode(CHAT) == new.encode(CHAT)
    assert with_chat_tokens(loaded)[1] == []


@pytest.mark.parametrize("added", [{"<|user|>": 300}, {"<|endoftext|>": 263}, ["<|user|>"], {"<|user|>": True}])
def test_bad_r50k_markers_are_refused(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, added: object) -> None:
    file = _fake_r50k(tmp_path / "cache")
    monkeypatch.setenv("TIKTOKEN_CACHE_DIR", str(tmp_path / "cache"))
    monkeypatch.setattr(r50k, "R50K_SHA256", hashlib.sha256(file.read_bytes()).hexdigest())
    (tmp_path / "tokenizer.json").write_text(json.dumps({MARKER_KEY: "r50k_base", ADDED_KEY: added}))
    with pytest.raises(TinyLMError, match=ADDED_KEY):
        load_tokenizer(tmp_path)
