"""The sample `tinylm train` prints at its end: what the model learned of its corpus, the same text for the same seed.

On the default corpus (the standard library's source) it continues "def", not a new document: `make demo`'s
model opened new documents with a license header and looped on its numbers. A new document, where one is
asked for, is never empty."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from test_train_support import config, data_dir
from tinylm.checkpoint import load_model
from tinylm.stages.pretrain import pretrain, sample
from tinylm.stages.pretrain.config import PretrainConfig
from tinylm.stages.pretrain.sample import closing_prompt, sample_ids, sample_text

pytestmark = pytest.mark.usefixtures("one_thread")


def test_the_default_prompt_is_the_corpus_own() -> None:
    assert PretrainConfig.__dataclass_fields__["prompt"].default is None  # unset: the corpus decides
    assert closing_prompt(None, "pystdlib") == "def"  # the default corpus: Python source
    assert closing_prompt(None, "my-notes") == closing_prompt("", "pystdlib") == ""  # a new document
    assert closing_prompt("class", "pystdlib") == "class"


def test_the_closing_sample_is_prompted_as_its_corpus_and_reproducible(tmp_path: Path, monkeypatch) -> None:
    corpus = json.loads((data_dir() / "dev.json").read_text())["corpus"]
    monkeypatch.setitem(sample.CORPUS_PROMPTS, corpus, "def")  # the test corpus as if it were the default one
    texts = []
    for name in ("a", "b"):
        summary = pretrain(config(tmp_path / name, max_steps=3, sample_tokens=10))
        [row] = [json.loads(line) for line in (tmp_path / name / "samples.jsonl").read_text().splitlines()]
        assert row["prompt"] == "def" and summary.sample == "def" + row["reply"]
        texts.append(summary.sample)
    assert texts[0] == texts[1]  # same seed, same text


def test_a_prompt_starts_a_document_after_end_of_text(tmp_path: Path) -> None:
    """As every document in training: "def" at the very start of the window, with nothing before it, made the
    demo's model write "defdefdef"."""
    model, tokenizer, _ = load_model(pretrain(config(tmp_path / "run", max_steps=2)).run_dir)
    ids = tokenizer.encode("def")
    new = sample_ids(model, [tokenizer.eot_id, *ids], 12, seed=5, stop_id=tokenizer.eot_id)
    expected = tokenizer.decode(ids + [t for t in new if t != tokenizer.eot_id])
    assert sample_text(model, tokenizer, "def", 12, seed=5) == expected


def test_a_new_document_sample_is_never_empty(tmp_path: Path) -> None:
    from chat_stop_support import chat_checkpoint

    run, tokenizer = chat_checkpoint(tmp_path, chain_of=lambda t: [t.eot_id], weight=10.0)  # end-of-text always
    model = load_model(run)[0]
    assert all(sample_text(model, tokenizer, "", 8, seed=seed) for seed in range(4))
