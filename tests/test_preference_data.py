"""Preference data: every file layout, bad rows as FILE:LINE, built-in pairs that the verifier proves, and
left truncation of the shared prompt that keeps both answers whole."""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any

import pytest

from tinylm.errors import TinyLMError
from tinylm.stages.preference.data import PreferenceRow, load_preferences, row_from_json
from tinylm.stages.preference.pair_rows import encode_pairs
from tinylm.tasks.preference_pairs import preference_pairs
from tinylm.tasks.registry import get_task

USER = {"role": "user", "content": "What is 2 + 2?"}


def _write(path: Path, rows: list[Any]) -> Path:
    path.write_text("".join((r if isinstance(r, str) else json.dumps(r)) + "\n" for r in rows), encoding="utf-8")
    return path


@pytest.mark.parametrize(("row", "prompt"), [
    ({"prompt": "What is 2 + 2?", "chosen": "4", "rejected": "5"}, [USER]),
    ({"prompt": [USER], "chosen": [{"role": "assistant", "content": "4"}],
      "rejected": [{"role": "assistant", "content": "5"}]}, [USER]),
    ({"prompt": "What is 2 + 2?", "chosen": [USER, {"role": "assistant", "content": "4"}],  # UltraFeedback
      "rejected": [USER, {"role": "assistant", "content": "5"}]}, [USER]),
    ({"chosen": "\n\nHuman: hi\n\nAssistant: hello\n\nHuman: What is 2 + 2?\n\nAssistant: 4",  # HH-RLHF
      "rejected": "\n\nHuman: hi\n\nAssistant: hello\n\nHuman: What is 2 + 2?\n\nAssistant: 5"},
     [{"role": "user", "content": "hi"}, {"role": "assistant", "content": "hello"}, USER]),
    ({"chosen": [USER, {"role": "assistant", "content": "4"}],  # trl's implicit prompt: the shared prefix
      "rejected": [USER, {"role": "assistant", "content": "5"}]}, [USER]),
    ({"chosen": [{"role": "system", "content": "be exact"}, USER, {"role": "assistant", "content": "4"}],
      "rejected": [{"role": "system", "content": "be exact"}, USER, {"role": "assistant", "content": "5"}]},
     [{"role": "system", "content": "be exact"}, USER]),
], ids=["text", "messages", "ultrafeedback", "hh_rlhf", "implicit_prompt", "implicit_prompt_with_system"])
def test_every_paired_layout_gives_the_same_shape(row: dict[str, Any], prompt: list[dict[str, str]]) -> None:
    parsed = row_from_json(row)
    assert parsed == PreferenceRow(tuple(prompt), "4", "5") and parsed.paired


def test_unpaired_rows_keep_one_side() -> None:
    good = row_from_json({"prompt": "What is 2 + 2?", "completion": "4", "label": True})
    bad = row_from_json({"prompt": "What is 2 + 2?", "completion": "5", "label": False})
    assert (good.chosen, good.rejected, bad.chosen, bad.rejected) == ("4", None, None, "5")
    assert not good.paired


@pytest.mark.parametrize(("row", "reason"), [
    ({"prompt": "q", "chosen": "", "rejected": "5"}, "the chosen answer is empty"),
    ({"prompt": "q", "chosen": "4", "rejected": "  "}, "the rejected answer is empty"),
    ({"prompt": "q", "chosen": "4", "rejected": "4"}, "chosen and rejected are identical"),
    ({"prompt": "q", "chosen": [{"role": "user", "content": "x"}], "rejected": "5"}, "no assistant message"),
    ({"chosen": "\n\nHuman: a\n\nAssistant: 4", "rejected": "\n\nHuman: b\n\nAssistant: 5"}, "share the same prompt"),
    ({"prompt": "q", "completion": "4", "label": "yes"}, "'label' must be true"),
    ({"text": "hello"}, "unknown row shape"),
    ({"chosen": [{"role": "user", "content": "a"}, {"role": "assistant", "content": "4"}],
      "rejected": [{"role": "user", "content": "b"}, {"role": "assistant", "content": "5"}]}, "share the same prompt"),
    ({"chosen": [{"role": "assistant", "content": "4"}], "rejected": [{"role": "assistant", "content": "5"}]},
     "no prompt"),
    ({"chosen": [USER, {"role": "assistant", "content": "4"}], "rejected": "\n\nHuman: q\n\nAssistant: 5"},
     "both message lists or both HH-RLHF transcripts"),
])
def test_bad_rows_stop_with_file_and_line(tmp_path: Path, row: dict[str, Any], reason: str) -> None:
    data = _write(tmp_path / "pairs.jsonl", [{"prompt": "q", "chosen": "a", "rejected": "b"}, row])
    with pytest.raises(TinyLMError, match=f"pairs.jsonl:2: .*{reason}"):
        load_preferences(str(data))
    skipped = load_preferences(str(data), on_error="skip")
    assert len(skipped) == 1 and skipped.skipped[0].startswith(f"{data}:2: ")


def test_builtin_pairs_are_verified_deterministic_and_respect_the_split() -> None:
    spec = "builtin:arith?digits=2"
    task = get_task(spec)
    train = preference_pairs(spec, "train", 300, seed=5)
    assert train == preference_pairs(spec, "train", 300, seed=5)
    assert train != preference_pairs(spec, "train", 300, seed=6)
    for pair in train:
        assert task.verify(pair.chosen, pair.example) and not task.verify(pair.rejected, pair.example)
    assert {p.mistake for p in train} == {"off_by_one", "off_by_minus_one", "wrong_operation", "wrong_digit"}
    test = preference_pairs(spec, "test", 100, seed=5)
    assert not {p.example.key for p in train} & {p.example.key for p in test}
    rows = load_preferences(spec, "train", seed=5, limit=300).rows
    assert [r.chosen for r in rows] == [p.chosen for p in train]


def test_builtin_function_pairs_mutate_the_reference_into_something_the_verifier_rejects() -> None:
    task = get_task("builtin:docstring")
    pairs = preference_pairs("builtin:docstring", "train", 40, seed=0)
    assert len(pairs) >= 30
    for pair in pairs:
        assert task.verify(pair.chosen, pair.example) and not task.verify(pair.rejected, pair.example)
        compile(pair.rejected, "<rejected>", "exec")  # a plausible wrong answer still parses
    assert len({p.mistake for p in pairs}) >= 3


def test_a_long_prompt_is_cut_from_the_left_so_both_answers_fit_whole() -> None:
    from test_sft import base_run
    from tinylm.tokenizer import load_tokenizer
    from tinylm.tokenizer.chat_format import ChatFormat

    tokenizer = load_tokenizer(base_run() / "checkpoints" / "step_00000004" / "tokenizer.json")
    chat = ChatFormat.from_tokenizer(tokenizer)
    prompt = ({"role": "user", "content": "alpha beta gamma delta " * 8 + "What is 2 + 2?"},)
    row = PreferenceRow(prompt, "4", "the answer is four")
    full = chat.prompt_ids(list(prompt))
    answers = {side: [*chat.content_ids(text), chat.end_id] for side, text in (("chosen", "4"),
                                                                                ("rejected", "the answer is four"))}
    width = len(answers["rejected"]) + 10
    encoded = encode_pairs([row], chat, width)
    assert encoded.truncated == 1 and encoded.dropped == 0
    for side, answer in answers.items():
        ids, mask = encoded.tensors[f"{side}_ids"][0].tolist(), encoded.tensors[f"{side}_mask"][0].tolist()
        n = int(encoded.tensors[f"{side}_length"][0])
        assert ids[:10] == full[-10:]  # the same most recent prompt tokens on both sides
        assert ids[10:n] == answer and mask[10:n] == [1] * len(answer) and sum(mask) == len(answer)
    assert encode_pairs([row], chat, len(answers["rejected"])).dropped == 1  # no room left for any prompt


def test_an_hf_spec_without_a_network_is_one_line() -> None:
    with pytest.raises(TinyLMError, match=r"^hf:tinylm-tests/no-such-pairs: "):
        load_preferences("hf:tinylm-tests/no-such-pairs")


def test_csv_and_json_array_files_hold_pairs(tmp_path: Path) -> None:
    pairs = tmp_path / "pairs.csv"
    pairs.write_text('prompt,chosen,rejected\nWhat is 2 + 2?,4,5\n"q, quoted",a,a\n', encoding="utf-8")
    with pytest.raises(TinyLMError, match=rf"^{re.escape(str(pairs))}:row 3: chosen and rejected are identical"):
        load_preferences(str(pairs))
    assert load_preferences(str(pairs), on_error="skip").rows == [PreferenceRow((USER,), "4", "5")]
    unpaired = tmp_path / "kto.csv"
    unpaired.write_text("prompt,completion,label\nWhat is 2 + 2?,4,true\nWhat is 2 + 2?,5,False\n", encoding="utf-8")
    assert [(r.chosen, r.rejected) for r in load_preferences(str(unpaired)).rows] == [("4", None), (None, "5")]
    array = tmp_path / "pairs.json"
    array.write_text(json.dumps([{"prompt": "What is 2 + 2?", "chosen": "4", "rejected": "5"}, {"prompt": "q"}]),
                     encoding="utf-8")
    with pytest.raises(TinyLMError, match=rf"^{re.escape(str(array))}\[1\]: unknown row shape"):
        load_preferences(str(array))


def test_bytes_that_are_not_utf8_in_pairs_are_noted_with_file_and_line(tmp_path: Path) -> None:
    good = json.dumps({"prompt": "What is 2 + 2?", "chosen": "4", "rejected": "5"}).encode()
    latin = json.dumps({"prompt": "Combien?", "chosen": "quatre", "rejected": "cinq é"},
                       ensure_ascii=False).encode("latin-1")
    data = tmp_path / "pairs.jsonl"
    data.write_bytes(good + b"\n" + latin + b"\n")
    loaded = load_preferences(str(data))
    assert loaded.rows[1].rejected == "cinq \ufffd"
    assert loaded.notes == [f"{data}:2: 1 character on 1 line is not UTF-8 and became U+FFFD "
                            "(the first on this line); convert the file to UTF-8 to keep it"]
    data.write_bytes(good + b"\n" + json.dumps({"prompt": "q", "chosen": "\xe9" * 80, "rejected": "x"},
                                              ensure_ascii=False).encode("latin-1") + b"\n")
    with pytest.raises(TinyLMError, match=rf"^{re.escape(str(data))}:2: mostly not UTF-8"):
        load_preferences(str(data))
