"""Corpora: the embedded stdlib, local files of every kind, Hugging Face datasets (local, no network)."""

from __future__ import annotations

import json
import os
import sysconfig
from pathlib import Path

import pytest

from tinylm.data.pystdlib import stdlib_files
from tinylm.data.rows.hf_spec import parse_hf_spec
from tinylm.data.sources import open_corpus
from tinylm.data.text import decode_text
from tinylm.errors import TinyLMError


def docs(spec: str, text_field: str = "text") -> list[str]:
    return list(open_corpus(spec, text_field).documents())


def test_pystdlib_is_the_stdlib_without_tests() -> None:
    root = Path(sysconfig.get_paths()["stdlib"])
    files = stdlib_files()
    rel = [p.relative_to(root).as_posix() for p in files]
    assert rel == sorted(rel) and "os.py" in rel and "json/decoder.py" in rel
    assert not [r for r in rel if {"test", "tests", "site-packages"} & set(r.split("/")[:-1])]
    assert not [r for r in rel if any(part.endswith("_test") for part in r.split("/")[:-1])]
    size = sum(p.stat().st_size for p in files)
    assert 5e6 < size < 30e6, f"pystdlib is {size / 1e6:.1f} MB"
    corpus = open_corpus("pystdlib")
    assert corpus.spec == "pystdlib" and corpus.total_bytes == size
    first = next(corpus.documents())
    assert first == files[0].read_text(encoding="utf-8") or not files[0].read_text(encoding="utf-8").strip()


def test_text_files_folder_order_and_hidden(tmp_path: Path) -> None:
    (tmp_path / "b").mkdir()
    (tmp_path / ".git").mkdir()
    (tmp_path / "b" / "z.md").write_text("# zed\n")
    (tmp_path / "a.txt").write_text("first\r\nkeeps CRLF\n")
    (tmp_path / "c.py").write_text("print('c')\n")
    (tmp_path / ".git" / "x.txt").write_text("hidden\n")
    (tmp_path / ".secret.txt").write_text("hidden too\n")
    (tmp_path / "notes.csv").write_text("skipped,kind\n")
    (tmp_path / "empty.txt").write_text("  \n\t")
    corpus = open_corpus(str(tmp_path))
    assert list(corpus.documents()) == ["first\r\nkeeps CRLF\n", "# zed\n", "print('c')\n"]
    assert corpus.stats.empty == 1
    assert corpus.spec == str(tmp_path.absolute())
    assert docs(str(tmp_path / "a.txt")) == ["first\r\nkeeps CRLF\n"]
    assert docs(str(tmp_path / "**" / "*.md")) == ["# zed\n"]


def test_fingerprint_follows_the_files(tmp_path: Path) -> None:
    file = tmp_path / "a.txt"
    file.write_text("one")
    before = open_corpus(str(tmp_path)).fingerprint
    assert open_corpus(str(tmp_path)).fingerprint == before
    file.write_text("one, longer")
    assert open_corpus(str(tmp_path)).fingerprint != before


def test_jsonl_and_text_field(tmp_path: Path) -> None:
    rows = [{"text": "alpha", "body": "A"}, {"text": "beta\nwith newline \u2028 sep", "body": "B"}]
    lines = [json.dumps(r) for r in rows]
    (tmp_path / "d.jsonl").write_text(lines[0] + "\n\n" + lines[1] + "\n")
    assert docs(str(tmp_path / "d.jsonl")) == ["alpha", "beta\nwith newline \u2028 sep"]
    assert docs(str(tmp_path / "d.jsonl"), text_field="body") == ["A", "B"]
    with pytest.raises(TinyLMError, match=r"d.jsonl:1: no 'content' field \(found: text, body\)"):
        docs(str(tmp_path / "d.jsonl"), text_field="content")
    (tmp_path / "bad.jsonl").write_text('{"text": "ok"}\n{"text": \n')
    with pytest.raises(TinyLMError, match=r"bad.jsonl:2: not valid JSON"):
        docs(str(tmp_path / "bad.jsonl"))
    (tmp_path / "num.jsonl").write_text('{"text": 5}\n')
    with pytest.raises(TinyLMError, match="holds int, not text"):
        docs(str(tmp_path / "num.jsonl"))
    (tmp_path / "sur.jsonl").write_text('{"text": "a\\ud800b"}\n')
    corpus = open_corpus(str(tmp_path / "sur.jsonl"))
    assert list(corpus.documents()) == ["a\ufffdb"] and corpus.stats.replaced == 1


def test_parquet(tmp_path: Path) -> None:
    pa = pytest.importorskip("pyarrow")
    import pyarrow.parquet as pq

    pq.write_table(pa.table({"text": ["one", None, "two"], "n": [1, 2, 3]}), tmp_path / "d.parquet")
    assert docs(str(tmp_path / "d.parquet")) == ["one", "two"]
    with pytest.raises(TinyLMError, match=r"no 'body' column \(found: text, n\)"):
        docs(str(tmp_path / "d.parquet"), text_field="body")
    with pytest.raises(TinyLMError, match="holds int"):
        docs(str(tmp_path / "d.parquet"), text_field="n")
    (tmp_path / "broken.parquet").write_bytes(b"PAR1 not really")
    with pytest.raises(TinyLMError, match="not a readable Parquet file"):
        docs(str(tmp_path / "broken.parquet"))


def test_undecodable_bytes_rule(tmp_path: Path) -> None:
    assert decode_text(b"\xef\xbb\xbfhello", "f") == ("hello", False)  # BOM dropped
    assert decode_text("café".encode(), "f") == ("café", False)
    # a Latin-1 byte and a cut-off emoji
    assert decode_text(b"caf\xe9 ok \xf0\x9f", "f") == ("caf\ufffd ok \ufffd", True)
    (tmp_path / "latin1.txt").write_bytes("naïve café".encode("latin-1"))
    corpus = open_corpus(str(tmp_path))
    assert list(corpus.documents()) == ["na\ufffdve caf\ufffd"] and corpus.stats.replaced == 1


def test_bad_local_specs(tmp_path: Path) -> None:
    with pytest.raises(TinyLMError, match="corpus not found"):
        open_corpus(str(tmp_path / "nope"))
    with pytest.raises(TinyLMError, match="empty"):
        open_corpus("  ")
    (tmp_path / "empty").mkdir()
    with pytest.raises(TinyLMError, match="holds no"):
        open_corpus(str(tmp_path / "empty"))
    with pytest.raises(TinyLMError, match="no .* files match"):
        open_corpus(str(tmp_path / "*.txt"))
    (tmp_path / "data.csv").write_text("a,b\n")
    with pytest.raises(TinyLMError, match="unsupported file type '.csv'"):
        open_corpus(str(tmp_path / "data.csv"))
    (tmp_path / "blob.txt").write_bytes(b"\x89PNG\r\n\x1a\n\x00\x00\x00\rIHDR")
    with pytest.raises(TinyLMError, match=r"blob.txt looks like a binary file"):
        docs(str(tmp_path / "blob.txt"))


def test_hf_spec_parsing() -> None:
    assert parse_hf_spec("hf:roneneldan/TinyStories") == ("roneneldan/TinyStories", None, "train")
    assert parse_hf_spec("hf:wikitext:wikitext-2-raw-v1") == ("wikitext", "wikitext-2-raw-v1", "train")
    assert parse_hf_spec("hf:name::validation") == ("name", None, "validation")
    for bad in ("hf:", "hf::x", "hf:a:b:c:d"):
        with pytest.raises(TinyLMError, match="expected hf:NAME"):
            parse_hf_spec(bad)


@pytest.fixture
def hf_cache(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """`datasets` writes lock files into its cache: keep them out of the real home."""
    datasets = pytest.importorskip("datasets")
    cache = tmp_path / "hf-cache"
    monkeypatch.setattr(datasets.config, "HF_DATASETS_CACHE", cache)
    return cache


def test_hf_local_data_files(tmp_path: Path, hf_cache: Path) -> None:
    folder = tmp_path / "ds"
    folder.mkdir()
    (folder / "train.jsonl").write_text("".join(json.dumps({"text": f"story {i}"}) + "\n" for i in range(3)))
    (folder / "validation.jsonl").write_text(json.dumps({"text": "held out"}) + "\n")
    corpus = open_corpus(f"hf:{folder}")
    assert corpus.spec == f"hf:{folder}::train"
    assert list(corpus.documents()) == ["story 0", "story 1", "story 2"]
    assert list(corpus.documents()) == ["story 0", "story 1", "story 2"]  # readable twice
    assert docs(f"hf:{folder}::validation") == ["held out"]
    with pytest.raises(TinyLMError, match="no 'body' field"):
        docs(f"hf:{folder}", text_field="body")
    with pytest.raises(TinyLMError, match="cannot read Hugging Face dataset.*nosuch"):
        open_corpus(f"hf:{folder}::nosuch")


def test_hf_local_files_use_the_packaged_builders(tmp_path: Path, hf_cache: Path) -> None:
    import pyarrow as pa
    import pyarrow.parquet as pq

    (tmp_path / "rows.jsonl").write_text('{"text": "json row"}\n{"text": "two"}\n')
    pq.write_table(pa.table({"content": ["parquet row"]}), tmp_path / "rows.parquet")
    (tmp_path / "notes.xyz").write_text("?")
    assert docs(f"hf:{tmp_path / 'rows.jsonl'}") == ["json row", "two"]
    assert docs(f"hf:{tmp_path / 'rows.parquet'}::validation", text_field="content") == ["parquet row"]
    with pytest.raises(TinyLMError, match="no builder for .xyz files"):
        open_corpus(f"hf:{tmp_path / 'notes.xyz'}")
    before = open_corpus(f"hf:{tmp_path / 'rows.jsonl'}").fingerprint
    (tmp_path / "rows.jsonl").write_text(json.dumps({"text": "changed"}) + "\n")
    assert open_corpus(f"hf:{tmp_path / 'rows.jsonl'}").fingerprint != before


def test_hf_saved_to_disk(tmp_path: Path, hf_cache: Path) -> None:
    import datasets

    data = datasets.Dataset.from_dict({"text": ["x y", "z"], "n": [1, 2]})
    datasets.DatasetDict({"train": data, "test": data.select([1])}).save_to_disk(str(tmp_path / "saved"))
    assert docs(f"hf:{tmp_path / 'saved'}") == ["x y", "z"]
    assert docs(f"hf:{tmp_path / 'saved'}::test") == ["z"]
    with pytest.raises(TinyLMError, match="holds int"):
        docs(f"hf:{tmp_path / 'saved'}", text_field="n")


def test_hf_offline_fails_with_one_line(hf_cache: Path) -> None:
    assert os.environ.get("HF_DATASETS_OFFLINE") == "1"  # conftest: no test reaches the network
    with pytest.raises(TinyLMError, match="offline") as info:
        open_corpus("hf:tinylm-tests/no-such-dataset")
    assert "\n" not in str(info.value)


def test_read_stats_count_characters_and_replacements(tmp_path: Path) -> None:
    (tmp_path / "a.txt").write_bytes(b"caf\xe9 \xff\xfe ok")  # three bytes that are not UTF-8
    (tmp_path / "b.txt").write_text("fine \ufffd text")  # a literal U+FFFD counts too: it is the same noise
    corpus = open_corpus(str(tmp_path))
    assert list(corpus.documents()) == ["caf\ufffd \ufffd\ufffd ok", "fine \ufffd text"]
    stats = corpus.stats
    assert (stats.replaced, stats.characters, stats.replacements) == (1, 10 + 11, 4)
    assert stats.replacement_share == pytest.approx(4 / 21)


def test_files_of_other_kinds_are_listed_as_skipped(tmp_path: Path) -> None:
    (tmp_path / "sub").mkdir()
    (tmp_path / "a.txt").write_text("text")
    (tmp_path / "sub" / "t.csv").write_text("a,b")
    (tmp_path / "README").write_text("no extension")
    (tmp_path / ".hidden.csv").write_text("hidden files are not the user's corpus")
    assert open_corpus(str(tmp_path)).skipped == [str(tmp_path / "README"), str(tmp_path / "sub" / "t.csv")]
    assert open_corpus(str(tmp_path / "**" / "*")).skipped == [str(tmp_path / "README"),
                                                               str(tmp_path / "sub" / "t.csv")]
    assert open_corpus(str(tmp_path / "a.txt")).skipped == []


def test_passkey_documents_hide_a_key_and_ask_for_it_in_the_evaluations_words() -> None:
    import re

    from tinylm.data.passkey_words import FILLER
    from tinylm.data.passkey_words import QUESTION as EVAL_QUESTION

    corpus = open_corpus("passkey:40")
    texts = list(corpus.documents())
    assert corpus.spec == "passkey:40" and len(texts) == 40 and texts == docs("passkey:40")  # seeded
    keys = []
    for text in texts:
        needle = re.search(r"The pass key is (\d{5})\. Remember it\. (\d{5}) is the pass key\. ", text)
        assert needle and needle.group(1) == needle.group(2)
        assert text.endswith(f"{EVAL_QUESTION} {needle.group(1)}.")
        keys.append(needle.group(1))
    in_evaluation_words = [t for t in texts if any(s.strip() + "." in t for s in FILLER.split(".") if s.strip())]
    assert 10 < len(in_evaluation_words) < 30  # half in the evaluation's filler, half in sentences of their own
    assert all("The river" not in t and "A red kite" not in t for t in in_evaluation_words)
    assert len(set(keys)) > 35  # fresh keys
    gaps = [len(t.split("Remember it.")[1]) for t in texts]
    assert min(gaps) < 400 < 2000 < max(gaps)  # the key near the question and far from it
    assert docs("passkey")[:40] != texts and len(docs("passkey")) == 12_000


def test_long_passkey_documents_ask_across_any_distance_up_to_their_length() -> None:
    """passkey:N:LEN: every document longer than LEN tokens, the key asked for from near to all of LEN tokens
    back (counted here by the `tiny` BPE, on a tokenizer trained on the documents themselves)."""
    import re

    from tinylm.data.passkey_words import QUESTION as EVAL_QUESTION
    from tinylm.tokenizer.train import train_bpe

    corpus = open_corpus("passkey:60:512")
    texts = list(corpus.documents())
    assert corpus.spec == "passkey:60:512" and len(texts) == 60 and texts == docs("passkey:60:512")  # seeded
    assert corpus.fingerprint != open_corpus("passkey:60:1024").fingerprint != open_corpus("passkey:60").fingerprint
    tokenizer = train_bpe(docs("pystdlib")[:300] + docs("passkey:2000"), 4096)
    distances = []
    for text in texts:
        needle = re.search(r"The pass key is (\d{5})\. Remember it\. (\d{5}) is the pass key\. ", text)
        assert needle and text.endswith(f"{EVAL_QUESTION} {needle.group(1)}.")
        assert len(tokenizer.encode(text)) > 512
        distances.append(len(tokenizer.encode(text[needle.start():])))  # the needle to the end, in tokens
    assert min(distances) < 0.2 * 512 and 0.9 * 512 < max(distances) < 1.03 * 512  # near to all of it
    far = [len(tokenizer.encode(t[t.index("The pass key is"):])) for t in docs("passkey:60:512:far")]
    assert max(far) < 1.03 * 512 and sum(d > 256 for d in far) > 38 > sum(d > 256 for d in distances)  # 3/4 vs 1/2
    with pytest.raises(TinyLMError, match="passkey:N:LEN:far is the only shape"):
        open_corpus("passkey:5:512:near")
    for spec in ("passkey:5:40", "passkey:5:x", "passkey:5:-9"):
        with pytest.raises(TinyLMError, match="passkey:N:LEN takes a length in tokens above 40"):
            open_corpus(spec)

def test_corpora_joined_by_plus_are_one_corpus_in_turn(tmp_path: Path) -> None:
    (tmp_path / "a.txt").write_text("first")
    (tmp_path / "b.txt").write_text("second")
    mixed = open_corpus(f"{tmp_path / 'a.txt'}+passkey:2+{tmp_path / 'b.txt'}")
    texts = list(mixed.documents())
    assert texts[0] == "first" and texts[-1] == "second" and texts[1:3] == docs("passkey:2")
    assert mixed.spec == f"{tmp_path / 'a.txt'}+passkey:2+{tmp_path / 'b.txt'}"
    assert mixed.fingerprint != open_corpus(f"{tmp_path / 'a.txt'}+passkey:3+{tmp_path / 'b.txt'}").fingerprint
    plus = tmp_path / "c++.txt"  # a file whose name holds a '+' is that file
    plus.write_text("plus")
    assert docs(str(plus)) == ["plus"]
    for spec, message in (("passkey:0", "passkey:N takes a positive number"), ("passkey:x", "positive number"),
                          (f"pystdlib+{tmp_path / 'missing.txt'}", "missing.txt")):
        with pytest.raises(TinyLMError, match=message):
            open_corpus(spec)
