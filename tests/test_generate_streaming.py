"""Incremental text: a character split across tokens is printed once, whole, when its last byte arrives."""

from __future__ import annotations

from tinylm.inference.streaming import TextStream


class SplitBytes:
    """A tokenizer whose tokens are arbitrary byte strings (as a byte-level BPE's can be)."""

    def __init__(self, pieces: list[bytes]) -> None:
        self.pieces = pieces

    def token_bytes(self, token_id: int) -> bytes:
        return self.pieces[token_id]

    def decode(self, ids: list[int]) -> str:
        return b"".join(self.pieces[i] for i in ids).decode("utf-8", errors="replace")


class DecodeOnly(SplitBytes):
    token_bytes = None  # type: ignore[assignment]

    def __getattribute__(self, name: str):
        if name == "token_bytes":
            raise AttributeError(name)
        return super().__getattribute__(name)


TEXT = "café 🐍 ok"
RAW = TEXT.encode("utf-8")
# cut inside "é" (2 bytes) and twice inside the 4-byte snake
PIECES = [RAW[:4], RAW[4:5], RAW[5:8], RAW[8:10], RAW[10:]]


def _stream(tokenizer) -> list[str]:
    stream = TextStream(tokenizer)
    out = [stream.push(i) for i in range(len(PIECES))]
    return [*out, stream.flush()]


def test_bytes_path_never_emits_half_a_character() -> None:
    out = _stream(SplitBytes(PIECES))
    assert "".join(out) == TEXT
    assert not any("\ufffd" in piece for piece in out)
    assert out[0] == "caf" and out[1] == "é"


def test_decode_fallback_gives_the_same_text() -> None:
    out = _stream(DecodeOnly(PIECES))
    assert "".join(out) == TEXT
    assert not any("\ufffd" in piece for piece in out)


def test_real_tokenizer_streams_exactly_its_decode() -> None:
    from tinylm.tokenizer import train_bpe

    tokenizer = train_bpe(["naïve café déjà vu 🐍🐍 " * 20, "plain ascii text " * 20], vocab_size=300)
    ids = tokenizer.encode("déjà 🐍 naïve ☕ x")
    stream = TextStream(tokenizer)
    pieces = [stream.push(i) for i in ids] + [stream.flush()]
    assert "".join(pieces) == tokenizer.decode(ids) == "déjà 🐍 naïve ☕ x"
    assert not any("\ufffd" in piece for piece in pieces)
