"""Over-long runs without whitespace are cut, so prepare stays linear in the corpus (issue 11, item 10).

The reference for "a pre-token" is Hugging Face's own byte-level pre-tokenizer (the GPT-2 regex), not
ours: every piece we hand to the tokenizer must give pre-tokens of at most MAX_RUN_CHARS + 1
characters (the run plus one leading space), while ordinary text must stay one piece, encoded
exactly as before.
"""

from __future__ import annotations

import base64
import functools
import json
import time
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from tinylm.data.encode import encode_documents
from tinylm.data.long_runs import MAX_RUN_CHARS, cut_long_runs
from tinylm.data.prepare import prepare_dataset
from tinylm.data.pystdlib import stdlib_files
from tinylm.tokenizer import load_tokenizer
from tinylm.tokenizer.tokenizer import Tokenizer
from tinylm.tokenizer.train import train_bpe


def longest_pretoken(text: str) -> int:
    from tokenizers import pre_tokenizers

    splitter = pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=True)
    return max((end - start for _, (start, end) in splitter.pre_tokenize_str(text)), default=0)


@functools.cache
def stdlib_paths() -> list[Path]:
    return stdlib_files()


def stdlib_sample(n_files: int = 40, n_chars: int = 20_000) -> list[str]:
    return [path.read_text(encoding="utf-8")[:n_chars] for path in stdlib_paths()[:n_files]]


def dna(n_chars: int, seed: int = 0) -> str:
    """A DNA sequence on one line: letters only, so the GPT-2 pattern makes it one pre-token of n_chars.

    Before the cut this took quadratic time (50 KB: 1.7 s, 100 KB: 6.8 s, 200 KB: 23 s on 2 cores).
    """
    return "".join(np.random.default_rng(seed).choice(list("ACGT"), n_chars))


NO_WHITESPACE = {
    "minified code": "f(a,b){x=a+b;return(x*2)}if(y<3){z='it\'s'}" * 120,
    "a paragraph of Japanese": "東京は日本の首都です。人口は約1400万人、面積は2194km²。" * 80,
    "base64": base64.b64encode(np.random.default_rng(0).integers(0, 256, 6000, dtype=np.uint8).tobytes()).decode(),
}


@pytest.fixture(scope="module")
def tokenizer() -> Tokenizer:
    """Trained on code and on the texts without whitespace, so merges exist inside their runs too."""
    pieces = [piece for text in NO_WHITESPACE.values() for piece in cut_long_runs(text)]
    return train_bpe(stdlib_sample(20, 5000) + pieces, vocab_size=600)


LONG_RUNS = {
    "letters": "x" * 5000,
    "spaces then a word": " " * 3000 + "word",
    "one long run among short words": "a b " + "y" * 2049 + " z\n",
    # Python's str.isspace() counts U+001C, the tokenizers' regex does not: still one run to them
    "file separators": "!\x1c" * 1500,
    "mixed scripts": ("naïve Straße 東京 " + "é" * 1500 + "\U0001f642" * 1100) * 2,
}


@pytest.mark.parametrize("case", LONG_RUNS)
def test_pieces_bound_every_pretoken(case: str) -> None:
    text = LONG_RUNS[case]
    assert longest_pretoken(text) > MAX_RUN_CHARS + 1  # the problem, as the tokenizer sees it
    pieces = cut_long_runs(text)
    assert "".join(pieces) == text and len(pieces) > 1
    assert max(longest_pretoken(piece) for piece in pieces) <= MAX_RUN_CHARS + 1


def test_cuts_fall_every_max_run_characters_inside_a_run() -> None:
    assert [len(p) for p in cut_long_runs("x" * 5000)] == [1024, 1024, 1024, 1024, 904]
    assert [len(p) for p in cut_long_runs("a b " + "y" * 2049 + " z")] == [4 + 1024, 1024, 1 + 2]
    # with a place the GPT-2 pattern splits anyway (after "!", before a letter) shortly before the bound: there
    assert [len(p) for p in cut_long_runs("abcdefghi!" * 200)] == [1020, 980]
    assert [len(p) for p in cut_long_runs("abcdefghi'" * 200)] == [1019, 981]  # never right after an apostrophe
    exactly = "q" * MAX_RUN_CHARS + " " * MAX_RUN_CHARS + "q" * MAX_RUN_CHARS
    assert cut_long_runs(exactly) == [exactly]  # runs of exactly the bound are left alone


def test_ordinary_text_is_one_piece_and_encodes_exactly_as_before(tokenizer: Tokenizer) -> None:
    documents = stdlib_sample()
    assert all(cut_long_runs(text) == [text] for text in documents)
    encoded = encode_documents(tokenizer, documents)
    assert [ids.tolist() for ids in encoded] == [tokenizer.encode_ordinary(text) for text in documents]


@pytest.mark.parametrize("case", NO_WHITESPACE)
def test_long_runs_with_natural_breaks_still_encode_exactly(case: str, tokenizer: Tokenizer) -> None:
    """The cuts fall where the GPT-2 pattern splits anyway, so the ids equal tiktoken's on the whole text."""
    text = NO_WHITESPACE[case]
    pieces = cut_long_runs(text)
    assert len(pieces) > 1 and max(len(p) for p in pieces) <= MAX_RUN_CHARS
    assert encode_documents(tokenizer, [text])[0].tolist() == tokenizer.encode_ordinary(text)


def test_cut_text_still_decodes_exactly(tokenizer: Tokenizer) -> None:
    texts = list(LONG_RUNS.values())
    for text, ids in zip(texts, encode_documents(tokenizer, texts)):
        assert tokenizer.decode(ids.tolist()) == text


def test_prepare_feeds_only_bounded_pieces_to_the_tokenizer(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A 512 KB line of letters (minutes before): training and encoding see pieces of at most the bound."""
    import tinylm.tokenizer.train as train_module

    seen: dict[str, int] = {"train": 0, "encode": 0}
    real_train, real_encode = train_module.train_bpe, Tokenizer.encode_arrays

    def check(stage: str, texts: list[str]) -> None:
        seen[stage] = max(seen[stage], *(len(t) for t in texts))
        assert seen[stage] <= MAX_RUN_CHARS, f"{stage} got a piece of {seen[stage]} characters"

    def spy_train(texts: list[str], *args: Any, **kwargs: Any) -> Tokenizer:
        check("train", texts)
        return real_train(texts, *args, **kwargs)

    def spy_encode(self: Tokenizer, texts: list[str]) -> list[np.ndarray]:
        check("encode", texts)
        return real_encode(self, texts)

    monkeypatch.setattr(train_module, "train_bpe", spy_train)
    monkeypatch.setattr(Tokenizer, "encode_arrays", spy_encode)
    text = dna(1 << 19)
    (tmp_path / "line.txt").write_text(text, encoding="utf-8")
    out = prepare_dataset(str(tmp_path / "line.txt"), out=tmp_path / "d", vocab_size=512, context_length=64,
                          progress=False)
    assert seen == {"train": MAX_RUN_CHARS, "encode": MAX_RUN_CHARS}
    tok = load_tokenizer(out)
    meta = {split: json.loads((out / f"{split}.json").read_text()) for split in ("train", "dev")}
    stream = np.concatenate([np.fromfile(out / f"{s}.bin", dtype=meta[s]["dtype"]) for s in ("train", "dev")])
    assert tok.decode_bytes(stream[stream != tok.eot_id].tolist()) == text.encode()  # lossless
    assert meta["train"]["config"]["max_run_chars"] == MAX_RUN_CHARS


@pytest.mark.slow
def test_prepare_time_grows_linearly_with_a_whitespace_free_line(tmp_path: Path) -> None:
    """Before the cut, 4x the text took 16x the time (quadratic); now about 4x."""
    def seconds(n_chars: int) -> float:
        corpus = tmp_path / f"line{n_chars}.txt"
        corpus.write_text(dna(n_chars), encoding="utf-8")
        best = float("inf")
        for attempt in range(2):
            start = time.perf_counter()
            prepare_dataset(str(corpus), out=tmp_path / f"d{n_chars}-{attempt}", vocab_size=512, context_length=64,
                            progress=False)
            best = min(best, time.perf_counter() - start)
        return best

    small, large = seconds(250_000), seconds(1_000_000)
    assert large < 9 * small, f"250 KB: {small:.2f} s, 1 MB: {large:.2f} s"
