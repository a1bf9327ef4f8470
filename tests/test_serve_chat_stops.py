"""Serving a chat model: special tokens are never text, and end-of-turn ends a completion too.

The micro model's greedy reply is 'ret', <|system|>, 'urn', <|end|> (tests/chat_stop_support.py).
Before, /v1/completions answered "ret<|system|>urn<|end|>ret..." up to max_tokens with
finish_reason "length".
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import openai
import pytest

from chat_stop_support import chat_checkpoint
from serve_support import make_checkpoint, serving
from tinylm.checkpoint import load_model
from tinylm.serve.served_model import ServedModel

pytestmark = pytest.mark.usefixtures("one_thread")


def served_as_the_cli_does(run_dir: Path) -> ServedModel:
    model, tokenizer, meta = load_model(run_dir)
    return ServedModel.build("micro", model, tokenizer, meta=meta)


@pytest.fixture(scope="module")
def client(tmp_path_factory: pytest.TempPathFactory) -> Iterator[openai.OpenAI]:
    run_dir, _ = chat_checkpoint(tmp_path_factory.mktemp("serve-chat"))
    with serving(run_dir) as (url, served, _):
        served.chat_model = served_as_the_cli_does(run_dir).chat_model  # what `tinylm serve` builds from config.json
        yield openai.OpenAI(base_url=url + "/v1", api_key="unused", max_retries=0, timeout=60)


def test_a_checkpoint_with_a_chat_template_is_served_as_a_chat_model(tmp_path: Path) -> None:
    """The checkpoint decides, as for `tinylm chat`: a base model's tokenizer reserves the chat tokens too."""
    assert served_as_the_cli_does(chat_checkpoint(tmp_path)[0]).chat_model
    base = served_as_the_cli_does(make_checkpoint(tmp_path))
    assert not base.chat_model and base.completion_stop_ids == {base.tokenizer.eot_id}


def test_a_completion_stops_at_end_of_turn_without_markup(client: openai.OpenAI) -> None:
    reply = client.completions.create(model="micro", prompt="def add", max_tokens=12, temperature=0)
    assert reply.choices[0].text == "return"
    assert reply.choices[0].finish_reason == "stop"
    assert reply.usage.completion_tokens == 4  # the stop token is counted, as end-of-text is
    chunks = list(client.completions.create(model="micro", prompt="def add", max_tokens=12, temperature=0,
                                            stream=True))
    assert "".join(c.choices[0].text for c in chunks) == "return"
    assert [c.choices[0].finish_reason for c in chunks if c.choices[0].finish_reason] == ["stop"]


def test_chat_replies_hold_no_special_token_text(client: openai.OpenAI) -> None:
    messages = [{"role": "user", "content": "hi there"}]
    reply = client.chat.completions.create(model="micro", messages=messages, max_tokens=12, temperature=0)
    assert reply.choices[0].message.content == "return" and reply.choices[0].finish_reason == "stop"
    chunks = list(client.chat.completions.create(model="micro", messages=messages, max_tokens=12, temperature=0,
                                                 stream=True))
    assert "".join(c.choices[0].delta.content or "" for c in chunks) == "return"
