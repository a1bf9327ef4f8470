"""The studio's chat: the whole conversation sent to a run's checkpoint through the serving engine, one
checkpoint or two side by side, with the server's sampling, stops and errors."""

from __future__ import annotations

import json
from pathlib import Path

import httpx
import pytest

from chat_stop_support import chat_checkpoint
from serve_support import make_checkpoint
from studio_support import studio
from tinylm.studio.chat_models import ChatModels
from tinylm.tokenizer import Tokenizer
from tinylm.tokenizer.chat_format import ChatFormat

pytestmark = pytest.mark.usefixtures("one_thread")


def reversed_reply(tokenizer: Tokenizer) -> list[int]:
    """'urn' then 'ret' then <|end|>: a second model whose answer differs from the first's 'return'."""
    return [*tokenizer.encode_ordinary("urn"), *tokenizer.encode_ordinary("ret"), tokenizer.special_tokens["<|end|>"]]


def plain_reply(tokenizer: Tokenizer) -> list[int]:
    return [*tokenizer.encode_ordinary("ret"), *tokenizer.encode_ordinary("urn"), tokenizer.special_tokens["<|end|>"]]


@pytest.fixture(scope="module")
def root(tmp_path_factory: pytest.TempPathFactory) -> Path:
    root = tmp_path_factory.mktemp("studio-chat")
    chat_checkpoint(root, plain_reply, "sft")
    chat_checkpoint(root, reversed_reply, "rl")
    make_checkpoint(root)  # micro-modern: a base model, no chat template
    return root


CONVERSATION = [{"role": "system", "content": "Be brief."}, {"role": "user", "content": "hi"},
                {"role": "assistant", "content": "return"}, {"role": "user", "content": "again"}]


def ask(url: str, run: str, **body: object) -> httpx.Response:
    return httpx.post(f"{url}/api/chat", json={"run": run, "messages": CONVERSATION, "temperature": 0,
                                               "max_tokens": 8, **body}, timeout=60)


def test_only_chat_checkpoints_are_offered(root: Path) -> None:
    with studio(root) as url:
        models = httpx.get(f"{url}/api/chat/models").json()["models"]
    assert [(m["run"], m["stage"], m["checkpoints"]) for m in models] == [
        ("rl", "sft", ["step_00000001"]), ("sft", "sft", ["step_00000001"])]


def test_a_reward_model_is_not_offered(root: Path, tmp_path: Path) -> None:
    """A reward model carries the chat template of the SFT run it grew from; the picker offered it, then it answered
    409 "is a reward model ... not a language model"."""
    import shutil

    shutil.copytree(root / "sft", tmp_path / "sft")
    shutil.copytree(root / "sft", tmp_path / "rm")
    config = next((tmp_path / "rm" / "checkpoints").iterdir()) / "config.json"
    config.write_text(json.dumps({**json.loads(config.read_text()), "reward_head": "score"}))
    with studio(tmp_path) as url:
        models = httpx.get(f"{url}/api/chat/models").json()["models"]
    assert [m["run"] for m in models] == ["sft"]


def test_the_whole_conversation_is_sent_and_each_model_answers_its_own(root: Path, tmp_path: Path) -> None:
    with studio(root) as url:
        sft, rl = ask(url, "sft").json(), ask(url, "rl", checkpoint="step_00000001").json()
    assert sft["choices"][0]["message"]["content"] == "return" and sft["choices"][0]["finish_reason"] == "stop"
    assert rl["choices"][0]["message"]["content"] == "urnret"
    _, tokenizer = chat_checkpoint(tmp_path / "scratch", plain_reply)  # not under the shared root: no new run there
    every_turn = ChatFormat.from_tokenizer(tokenizer).prompt_ids(CONVERSATION)
    assert sft["usage"]["prompt_tokens"] == len(every_turn)  # all four turns, not only the last
    assert sft["model"] == "sft@step_00000001"


def test_a_stream_and_a_stop_string_behave_as_the_server(root: Path) -> None:
    with studio(root) as url:
        with httpx.stream("POST", f"{url}/api/chat", json={"run": "sft", "messages": CONVERSATION, "stream": True,
                                                           "temperature": 0, "max_tokens": 8}, timeout=60) as reply:
            events = [line.removeprefix("data: ") for line in reply.iter_lines() if line.startswith("data: ")]
        assert events[-1] == "[DONE]"
        text = "".join(json.loads(e)["choices"][0]["delta"].get("content") or "" for e in events[:-1]
                       if json.loads(e)["choices"])
        assert text == "return"
        stopped = ask(url, "sft", stop=["urn"]).json()["choices"][0]
        assert stopped["message"]["content"] == "ret" and stopped["finish_reason"] == "stop"


@pytest.mark.parametrize(("body", "status", "message"), [
    ({"run": "micro-modern"}, 409, "not a chat model"),
    ({"run": "sft", "checkpoint": "step_9"}, 404, "no checkpoint 'step_9'"),
    ({"run": ""}, 400, "name the run"),
    ({"run": "../sft"}, 404, "no run"),
    ({"run": "sft", "messages": [{"role": "bot", "content": "x"}]}, 422, "messages.0.role"),
    ({"run": "sft", "temperature": -1}, 422, "temperature"),
    ({"run": "sft", "temperature": 99}, 422, "temperature: Input should be less than or equal to 2"),
    ({"run": "sft", "max_tokens": 0}, 422, "max_tokens: Input should be greater than or equal to 1"),
    ({"run": "sft", "tools": [{"type": "retrieval"}]}, 400, "tool 1 is of type 'retrieval'"),
    ({"run": "sft", "messages": []}, 400, "at least one message"),
    ({"run": "sft", "messages": [{"role": "user", "content": "ret urn " * 80}]}, 400, "window"),
])
def test_bad_chat_requests_are_4xx_json_and_the_studio_keeps_serving(root: Path, body: dict, status: int,
                                                                      message: str) -> None:
    with studio(root) as url:
        reply = httpx.post(f"{url}/api/chat", json={"messages": CONVERSATION, "max_tokens": 4, **body}, timeout=60)
        assert reply.status_code == status and message in reply.json()["error"]["message"], reply.text
        assert ask(url, "sft").status_code == 200


def test_the_least_recently_used_model_is_unloaded_past_the_capacity(root: Path) -> None:
    models = ChatModels(root.resolve(), capacity=1)
    try:
        first = models.get(*models.checkpoint("sft", None))
        assert models.get(*models.checkpoint("sft", None)) is first  # loaded once
        second = models.get(*models.checkpoint("rl", None))
        assert list(models.loaded.values()) == [second] and not first.scheduler.thread.is_alive()
    finally:
        models.close()
    assert not second.scheduler.thread.is_alive()


def test_a_chat_may_ask_the_studio_to_run_the_builtin_tools(tmp_path: Path) -> None:
    from test_serve_tools import TOOL_CORPUS, server_calling_chain

    chat_checkpoint(tmp_path, server_calling_chain, "caller", TOOL_CORPUS, context_length=512)
    with studio(tmp_path) as url:
        reply = httpx.post(f"{url}/api/chat", json={"run": "caller", "temperature": 0, "max_tokens": 60,
                                                    "messages": [{"role": "user", "content": "2 times 3?"}],
                                                    "builtin_tools": ["calculator"]}, timeout=60)
        assert reply.status_code == 200, reply.text
        message = reply.json()["choices"][0]["message"]
        assert [m["role"] for m in message["tool_messages"]][:2] == ["assistant", "tool"]
        assert message["tool_messages"][1]["content"] == "6"  # the calculator ran, in the studio's server
        assert message["reasoning_content"].startswith("hm")
