"""The studio's data preview: a stage's first training rows as tokens with the loss mask, from the stage's own
loaders and renderers, and the command's own "FILE:LINE: reason" for a bad row."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import httpx
import numpy as np
import pytest

from studio_support import studio
from test_train_support import cli_args, data_dir
from tinylm.checkpoint.layout import list_checkpoints
from tinylm.cli.main import main
from tinylm.errors import TinyLMError
from tinylm.stages.preference.data import load_preferences
from tinylm.stages.sft.data import load_conversations
from tinylm.tasks.registry import get_task
from tinylm.tokenizer.chat_format import ChatFormat
from tinylm.tokenizer.load import load_tokenizer

pytestmark = pytest.mark.usefixtures("one_thread")
ARITH = "builtin:arith"


@pytest.fixture(scope="module")
def root(tmp_path_factory: pytest.TempPathFactory) -> Path:
    root = tmp_path_factory.mktemp("studio-data")
    assert main(cli_args(root / "base", "--max-steps", "2")) == 0
    shutil.copytree(data_dir(), root / "prepared")
    return root


def chat(root: Path) -> ChatFormat:
    return ChatFormat.from_tokenizer(load_tokenizer(list_checkpoints(root / "base")[-1] / "tokenizer.json"))


def preview(url: str, **query: object) -> httpx.Response:
    return httpx.get(f"{url}/api/data", params={"run": "base", **query}, timeout=60)


def test_sft_rows_are_the_chat_formats_ids_and_mask(root: Path) -> None:
    with studio(root) as url:
        answer = preview(url, stage="sft", data=ARITH, limit=3).json()
    expected = [chat(root).render(c) for c in load_conversations(ARITH, limit=3).conversations]
    assert [[t["id"] for t in row["tokens"]] for row in answer["rows"]] == [r.ids for r in expected]
    assert [[t["learn"] for t in row["tokens"]] for row in answer["rows"]] == [r.mask for r in expected]
    first = answer["rows"][0]
    learned = "".join(t["text"] for t in first["tokens"] if t["learn"])
    assert learned == load_conversations(ARITH, limit=1).conversations[0][-1]["content"] + "<|end|>"
    assert first["n_learn"] == sum(expected[0].mask) and first["n_tokens"] == len(expected[0].ids)


def test_pairs_mask_each_answer_and_prompts_mask_nothing(root: Path) -> None:
    with studio(root) as url:
        pairs = preview(url, stage="dpo", data=ARITH, limit=2).json()["rows"]
        prompts = preview(url, stage="rl", data=ARITH, limit=2).json()["rows"]
    row = load_preferences(ARITH, limit=2).rows[0]
    assert [p["label"] for p in pairs[:2]] == ["pair 1 chosen", "pair 1 rejected"]
    for shown, answer in zip(pairs[:2], (row.chosen, row.rejected)):
        assert "".join(t["text"] for t in shown["tokens"] if t["learn"]) == answer + "<|end|>"
    example = get_task(ARITH).examples("train", 1, 0)[0]
    assert [t["id"] for t in prompts[0]["tokens"]] == chat(root).prompt_ids(example.prompt)
    assert not any(t["learn"] for t in prompts[0]["tokens"]) and prompts[0]["answer"] == example.answer


def test_pretraining_rows_from_a_prepared_folder_and_from_a_corpus(root: Path) -> None:
    (root / "corpus").mkdir(exist_ok=True)
    (root / "corpus" / "a.txt").write_text("def add(a, b):\n    return a + b\n" * 20)
    with studio(root) as url:
        prepared = preview(url, stage="pretrain", data="prepared", limit=2).json()
        corpus = preview(url, stage="pretrain", data="corpus", limit=1).json()
    dtype = json.loads((root / "prepared" / "train.json").read_text())["dtype"]
    ids = np.fromfile(root / "prepared" / "train.bin", dtype=dtype)[:256].tolist()  # two windows of 128
    assert [t["id"] for row in prepared["rows"] for t in row["tokens"]] == ids
    assert all(t["learn"] == 1 for row in prepared["rows"] for t in row["tokens"])
    text = "".join(t["text"] for t in corpus["rows"][0]["tokens"])
    assert text.startswith("<|endoftext|>def add(a, b):\n    return a + b\n")


def test_a_bad_row_is_the_commands_file_and_line(root: Path) -> None:
    bad = root / "bad.jsonl"
    good = {"messages": [{"role": "user", "content": "hi"}, {"role": "assistant", "content": "hello"}]}
    bad.write_text(json.dumps(good) + "\n" + json.dumps(good) + "\n{\"messages\": [oops\n")
    with pytest.raises(TinyLMError) as command:
        load_conversations(str(bad))
    with studio(root) as url:
        reply = preview(url, stage="sft", data="bad.jsonl")
        assert reply.status_code == 400 and reply.json()["error"]["message"] == str(command.value)
        assert f"{bad}:3:" in reply.json()["error"]["message"]
        assert preview(url, stage="sft", data=ARITH).status_code == 200  # still serving


@pytest.mark.parametrize(("query", "status", "message"), [
    ({"stage": "sft", "data": "../outside.jsonl"}, 403, "outside the runs root"),
    ({"stage": "sft", "data": "/etc/passwd"}, 403, "outside the runs root"),
    ({"stage": "rl", "data": "prompts:../x.jsonl"}, 403, "outside the runs root"),
    ({"stage": "sft", "data": "builtin:gsm8k?file=/etc/passwd"}, 403, "outside the runs root"),
    ({"stage": "rl", "data": "gsm8k:../x.jsonl"}, 403, "outside the runs root"),
    ({"stage": "sft", "data": "missing.jsonl"}, 400, "missing.jsonl"),
    ({"stage": "sft", "data": "builtin:nope"}, 400, "nope"),
    ({"stage": "dpo", "data": ARITH, "run": ""}, 400, "choose the run"),
    ({"stage": "nope", "data": ARITH}, 404, "no stage"),
    ({"stage": "sft", "data": ARITH, "run": "../x"}, 404, "no run"),
])
def test_bad_previews_are_one_line_4xx(root: Path, query: dict, status: int, message: str) -> None:
    with studio(root) as url:
        reply = preview(url, **query)
        assert reply.status_code == status and message in reply.json()["error"]["message"], reply.text
