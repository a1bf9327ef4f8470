"""SFT data specs: the three JSONL shapes, builtin tasks, hf: through `datasets`, and one clear line for bad input."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from tinylm.errors import TinyLMError
from tinylm.stages.sft.data import load_conversations, messages_from_row

OPENAI = {"messages": [{"role": "system", "content": "be brief"}, {"role": "user", "content": "hi"},
                       {"role": "assistant", "content": "hello"}]}
ALPACA = {"instruction": "Add the numbers.", "input": "2 and 3", "output": "5"}
ALPACA_NO_INPUT = {"instruction": "Say yes.", "input": "", "output": "yes"}
SHAREGPT = {"conversations": [{"from": "system", "value": "s"}, {"from": "human", "value": "q"},
                              {"from": "gpt", "value": "a"}]}


def write_jsonl(path: Path, lines: list[str | dict]) -> Path:
    path.write_text("".join((line if isinstance(line, str) else json.dumps(line)) + "\n" for line in lines))
    return path


def test_each_shape_maps_to_messages(tmp_path: Path) -> None:
    path = write_jsonl(tmp_path / "mixed.jsonl", [OPENAI, ALPACA, "", ALPACA_NO_INPUT, SHAREGPT])
    loaded = load_conversations(str(path)).conversations
    assert loaded == [
        OPENAI["messages"],
        [{"role": "user", "content": "Add the numbers.\n\n2 and 3"}, {"role": "assistant", "content": "5"}],
        [{"role": "user", "content": "Say yes."}, {"role": "assistant", "content": "yes"}],
        [{"role": "system", "content": "s"}, {"role": "user", "content": "q"}, {"role": "assistant", "content": "a"}],
    ]


@pytest.mark.parametrize("row, reason", [
    ('{"messages": [', "malformed JSON"),
    ({"messages": [{"role": "wizard", "content": "x"}]}, "unknown role 'wizard'"),
    ({"conversations": [{"from": "bard", "value": "x"}]}, "unknown role 'bard'"),
    ({"prompt": "x", "completion": "y"}, "unknown row shape"),
    ({"messages": [{"role": "user", "content": "only a question"}]}, "no assistant message"),
    ({"messages": [{"role": "user", "content": 3}, {"role": "assistant", "content": "x"}]},
     "the content of a user message must be a string"),
    ([1, 2], "expected a JSON object"),
])
def test_bad_row_stops_with_file_and_line(tmp_path: Path, row, reason: str) -> None:
    path = write_jsonl(tmp_path / "bad.jsonl", [OPENAI, row, OPENAI])
    with pytest.raises(TinyLMError, match=f"^{path}:2: {reason}"):
        load_conversations(str(path))


def test_bad_rows_can_be_skipped_and_are_counted(tmp_path: Path) -> None:
    path = write_jsonl(tmp_path / "some_bad.jsonl", [OPENAI, "{oops", ALPACA, {"messages": [{"role": "x"}]}])
    loaded = load_conversations(str(path), on_error="skip")
    assert len(loaded) == 2
    assert [reason.split(": ")[0] for reason in loaded.skipped] == [f"{path}:2", f"{path}:4"]


def test_empty_dataset_and_missing_file_are_one_line(tmp_path: Path) -> None:
    empty = write_jsonl(tmp_path / "empty.jsonl", [""])
    with pytest.raises(TinyLMError, match="no conversations to train on"):
        load_conversations(str(empty))
    all_bad = write_jsonl(tmp_path / "all_bad.jsonl", ["nope"])
    with pytest.raises(TinyLMError, match=r"no conversations to train on \(1 rows skipped"):
        load_conversations(str(all_bad), on_error="skip")
    with pytest.raises(TinyLMError, match="no such data file"):
        load_conversations(str(tmp_path / "missing.jsonl"))
    with pytest.raises(TinyLMError, match="on_error='ignore'"):
        load_conversations(str(empty), on_error="ignore")


def test_limit_caps_the_count(tmp_path: Path) -> None:
    path = write_jsonl(tmp_path / "many.jsonl", [OPENAI] * 5 + ["broken"])
    assert len(load_conversations(str(path), limit=3)) == 3  # stops before the broken line


def test_builtin_specs_go_through_tasks() -> None:
    train = load_conversations("builtin:arith?digits=2", seed=4, limit=20)
    test = load_conversations("builtin:arith?digits=2", "test", seed=4, limit=20)
    assert len(train) == len(test) == 20
    assert train.conversations == load_conversations("builtin:arith?digits=2", seed=4, limit=20).conversations
    assert not {c[0]["content"] for c in train.conversations} & {c[0]["content"] for c in test.conversations}
    assert [m["role"] for m in train.conversations[0]] == ["user", "assistant"]
    with pytest.raises(TinyLMError, match="unknown task"):
        load_conversations("builtin:poetry")


def test_hf_spec_reads_a_local_dataset_through_datasets(tmp_path: Path, monkeypatch) -> None:
    datasets = pytest.importorskip("datasets")
    monkeypatch.setattr(datasets.config, "HF_DATASETS_CACHE", str(tmp_path / "cache"))
    folder = tmp_path / "local_dataset"
    folder.mkdir()
    write_jsonl(folder / "train.jsonl", [ALPACA, SHAREGPT])  # datasets fills the other shape's columns with None
    loaded = load_conversations(f"hf:{folder}")
    assert loaded.conversations == [messages_from_row(ALPACA), messages_from_row(SHAREGPT)]


def test_hf_load_failure_is_one_line(monkeypatch) -> None:
    datasets = pytest.importorskip("datasets")

    def offline(*args, **kwargs):
        raise ConnectionError("Couldn't reach 'someone/chats' on the Hub\nmore detail")

    monkeypatch.setattr(datasets, "load_dataset", offline)
    with pytest.raises(TinyLMError, match=r"^hf:someone/chats:dev: could not load 'someone/chats' split 'dev': "
                                          r"Couldn't reach 'someone/chats' on the Hub$"):
        load_conversations("hf:someone/chats:dev")
