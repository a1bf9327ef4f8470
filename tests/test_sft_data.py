"""SFT data specs: the three JSONL shapes, builtin tasks, hf: through `datasets`, and one clear line for bad input."""

from __future__ import annotations

import json
import re
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
    with pytest.raises(TinyLMError, match=r"^hf:someone/chats::dev: cannot read Hugging Face dataset 'someone/chats' "
                                          r"split 'dev' .*: ConnectionError: Couldn't reach 'someone/chats' on the "
                                          r"Hub$"):
        load_conversations("hf:someone/chats::dev")


def _latin1_line(text: str) -> bytes:
    """A JSONL line whose user content is written in Latin-1, as an editor on an old system would save it."""
    row = {"messages": [{"role": "user", "content": text}, {"role": "assistant", "content": "oui"}]}
    return json.dumps(row, ensure_ascii=False).encode("latin-1")


def test_bytes_that_are_not_utf8_are_noted_with_file_and_line(tmp_path: Path) -> None:
    good = json.dumps(OPENAI).encode()
    path = tmp_path / "latin1.jsonl"
    path.write_bytes(b"\n".join([good, good, _latin1_line("un café"), _latin1_line("déjà vu")]) + b"\n")
    loaded = load_conversations(str(path))
    assert len(loaded) == 4 and loaded.conversations[2][0]["content"] == "un caf\ufffd"
    assert loaded.notes == [f"{path}:3: 3 characters on 2 lines are not UTF-8 and became U+FFFD "
                            "(the first on this line); convert the file to UTF-8 to keep them"]
    assert load_conversations(str(write_jsonl(tmp_path / "clean.jsonl", [OPENAI]))).notes == []


def test_a_file_mostly_not_utf8_is_refused_past_prepares_threshold(tmp_path: Path) -> None:
    from tinylm.data.corpus_report import MAX_REPLACEMENT_SHARE

    path = tmp_path / "latin1.jsonl"
    path.write_bytes(json.dumps(OPENAI).encode() + b"\n" + _latin1_line("\xe9" * 200) + b"\n")
    with pytest.raises(TinyLMError, match=rf"^{re.escape(str(path))}:2: mostly not UTF-8: \d+% of its characters "
                                          r"\(200 of \d+\) are U\+FFFD"):
        load_conversations(str(path))
    share = 200 / (len(json.dumps(OPENAI)) + len(_latin1_line("\xe9" * 200)) + 2)
    assert share > MAX_REPLACEMENT_SHARE  # the threshold is prepare's, not a second copy


def test_a_json_array_file_reads_like_alpaca_data_json(tmp_path: Path) -> None:
    path = tmp_path / "alpaca_data.json"
    path.write_text(json.dumps([ALPACA, ALPACA_NO_INPUT, OPENAI], indent=4), encoding="utf-8")
    assert load_conversations(str(path)).conversations == [messages_from_row(r) for r in (ALPACA, ALPACA_NO_INPUT,
                                                                                         OPENAI)]
    path.write_text(json.dumps([ALPACA, {"instruction": 3, "output": "x"}], indent=4), encoding="utf-8")
    with pytest.raises(TinyLMError, match=rf"^{re.escape(str(path))}\[1\]: Alpaca instruction"):
        load_conversations(str(path))
    path.write_text('[\n  {"instruction": "a",\n   "output": }\n]', encoding="utf-8")
    with pytest.raises(TinyLMError, match=rf"^{re.escape(str(path))}:3: malformed JSON"):
        load_conversations(str(path))
    path.write_text(json.dumps([ALPACA]) + "\n}", encoding="utf-8")
    with pytest.raises(TinyLMError, match=rf"^{re.escape(str(path))}:2: malformed JSON \(Extra data"):
        load_conversations(str(path))
    path.write_text(json.dumps({"data": [ALPACA]}), encoding="utf-8")
    with pytest.raises(TinyLMError, match=rf"^{re.escape(str(path))}: expected a JSON array of rows"):
        load_conversations(str(path))


def test_a_json_file_with_one_row_per_line_reads_as_jsonl(tmp_path: Path) -> None:
    path = write_jsonl(tmp_path / "rows.json", [ALPACA, OPENAI, {"messages": "oops"}])
    with pytest.raises(TinyLMError, match=rf"^{re.escape(str(path))}:3: expected a non-empty list"):
        load_conversations(str(path))
    assert len(load_conversations(str(path), on_error="skip")) == 2


def test_csv_with_a_header_reads_its_columns_as_the_jsonl_keys(tmp_path: Path) -> None:
    alpaca = tmp_path / "alpaca.csv"
    alpaca.write_text('instruction,input,output\nAdd the numbers.,2 and 3,5\n"Say ""yes"".",,"yes,\nreally"\n',
                      encoding="utf-8-sig")  # as Excel saves "CSV UTF-8": a byte-order mark first
    assert load_conversations(str(alpaca)).conversations == [
        messages_from_row(ALPACA), messages_from_row({"instruction": 'Say "yes".', "output": "yes,\nreally"})]
    pairs = tmp_path / "pairs.csv"
    pairs.write_text("prompt,response\nhi,hello\nq,a,extra\n", encoding="utf-8")
    with pytest.raises(TinyLMError, match=rf"^{re.escape(str(pairs))}:row 3: 3 cells but the header names 2"):
        load_conversations(str(pairs))
    loaded = load_conversations(str(pairs), on_error="skip")
    assert loaded.conversations == [[{"role": "user", "content": "hi"}, {"role": "assistant", "content": "hello"}]]
    assert loaded.skipped[0].startswith(f"{pairs}:row 3: ")


def test_a_byte_order_mark_is_not_part_of_the_first_row(tmp_path: Path) -> None:
    path = tmp_path / "bom.jsonl"
    path.write_text(json.dumps(OPENAI) + "\n", encoding="utf-8-sig")
    assert load_conversations(str(path)).conversations == [OPENAI["messages"]]


def test_prompt_response_rows_are_one_exchange() -> None:
    assert messages_from_row({"prompt": "q", "response": "a"}) == [{"role": "user", "content": "q"},
                                                                  {"role": "assistant", "content": "a"}]


def test_openai_content_parts_are_joined_text(tmp_path: Path) -> None:
    parts = {"messages": [{"role": "user", "content": [{"type": "text", "text": "Hello "},
                                                       {"type": "text", "text": "there"}]},
                          {"role": "assistant", "content": [{"type": "text", "text": "hi"}]}]}
    assert messages_from_row(parts) == [{"role": "user", "content": "Hello \nthere"},  # as the server joins them
                                        {"role": "assistant", "content": "hi"}]
    image = {"messages": [{"role": "user", "content": [{"type": "text", "text": "What is this?"},
                                                       {"type": "image_url", "image_url": {"url": "x.png"}}]},
                          {"role": "assistant", "content": "a cat"}]}
    path = write_jsonl(tmp_path / "parts.jsonl", [parts, image])
    with pytest.raises(TinyLMError, match=rf"^{re.escape(str(path))}:2: a user message has a content part of type "
                                          "'image_url': tinylm reads text parts only"):
        load_conversations(str(path))
