"""The served API, checked with the official `openai` client against a micro model on 127.0.0.1.

References: the in-process engine and the model's own log-softmax (what `tinylm` computes without a
server), and the text a model was trained to recite (for whole characters in streams).
"""

from __future__ import annotations

import json
import time
from collections.abc import Iterator
from pathlib import Path

import httpx
import openai
import pytest
import torch

from serve_support import PARROT_TEXT, make_checkpoint, make_parrot_checkpoint, serving
from tinylm.inference.engine import Engine
from tinylm.inference.sampling import GREEDY
from tinylm.serve.metrics import metric_value

pytestmark = pytest.mark.usefixtures("one_thread")
PROMPT = "def add(a, b):"


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[str, object]]:
    with serving(make_checkpoint(tmp_path_factory.mktemp("serve"))) as running:
        yield running


@pytest.fixture(scope="module")
def client(server) -> openai.OpenAI:
    return openai.OpenAI(base_url=server[0] + "/v1", api_key="unused", max_retries=0, timeout=60)


def engine_text(served, prompt_ids: list[int], max_tokens: int, stops: tuple[int, ...]) -> tuple[list[int], str]:
    """The engine's greedy ids and their text; special tokens are not text (the random model writes some)."""
    ids = Engine(served.model).generate([prompt_ids], max_tokens, GREEDY, stop_ids=stops)[0]
    specials = set(served.tokenizer.special_tokens.values())
    return ids, served.tokenizer.decode([i for i in ids if i not in specials])


def log_softmax_of(served, ids: list[int]) -> torch.Tensor:
    with torch.inference_mode():
        return torch.log_softmax(served.model(torch.tensor([ids]))[0][0].float(), dim=-1)


def test_models_and_health(server, client: openai.OpenAI) -> None:
    [model] = client.models.list().data
    assert model.id == "micro" and model.model_extra["max_model_len"] == 64
    assert httpx.get(server[0] + "/health").json() == {"status": "ok"}


def test_completion_streamed_equals_non_streamed_and_the_engine(server, client: openai.OpenAI) -> None:
    url, served, _ = server
    reply = client.completions.create(model="micro", prompt=PROMPT, max_tokens=24, temperature=0)
    prompt_ids = served.tokenizer.encode(PROMPT)
    ids, text = engine_text(served, prompt_ids, 24, (served.tokenizer.eot_id,))
    assert reply.choices[0].text == text and len(ids) == 24
    assert reply.choices[0].finish_reason == "length"
    assert (reply.usage.prompt_tokens, reply.usage.completion_tokens) == (len(prompt_ids), 24)
    chunks = list(client.completions.create(model="micro", prompt=PROMPT, max_tokens=24, temperature=0, stream=True,
                                            stream_options={"include_usage": True}))
    assert "".join(c.choices[0].text for c in chunks if c.choices) == text
    assert [c.choices[0].finish_reason for c in chunks if c.choices and c.choices[0].finish_reason] == ["length"]
    assert chunks[-1].choices == [] and chunks[-1].usage.completion_tokens == 24  # the usage chunk comes last
    assert all(c.usage is None for c in chunks[:-1])


def test_chat_streamed_equals_non_streamed_and_the_engine(server, client: openai.OpenAI) -> None:
    url, served, _ = server
    messages = [{"role": "system", "content": "Be brief."}, {"role": "user", "content": "Add 2 and 3."}]
    reply = client.chat.completions.create(model="micro", messages=messages, max_tokens=20, temperature=0)
    chat = served.chat_format
    prompt_ids = chat.prompt_ids(messages)
    ids, text = engine_text(served, prompt_ids, 20, chat.stop_ids)
    assert reply.choices[0].message.content == text and reply.choices[0].message.role == "assistant"
    stopped = reply.choices[0].finish_reason == "stop"  # the stop token is generated, so it counts
    assert reply.usage.prompt_tokens == len(prompt_ids) and reply.usage.completion_tokens == len(ids) + stopped
    chunks = list(client.chat.completions.create(model="micro", messages=messages, max_tokens=20, temperature=0,
                                                 stream=True, stream_options={"include_usage": True}))
    assert chunks[0].choices[0].delta.role == "assistant"
    assert "".join(c.choices[0].delta.content or "" for c in chunks if c.choices) == text
    reasons = [c.choices[0].finish_reason for c in chunks if c.choices and c.choices[0].finish_reason]
    assert reasons == [reply.choices[0].finish_reason]
    assert chunks[-1].usage.total_tokens == reply.usage.total_tokens


def test_content_as_a_list_of_text_parts_is_their_text_joined(client: openai.OpenAI) -> None:
    """OpenAI's list-of-parts content (what many clients send): text parts are joined with newlines, as vLLM does."""
    parts = [{"role": "system", "content": [{"type": "text", "text": "Be"}, {"type": "text", "text": "brief."}]},
             {"role": "user", "content": [{"type": "text", "text": "Add 2 and 3."}]}]
    joined = [{"role": "system", "content": "Be\nbrief."}, {"role": "user", "content": "Add 2 and 3."}]
    asked = [client.chat.completions.create(model="micro", messages=m, max_tokens=8, temperature=0)
             for m in (parts, joined)]
    assert asked[0].choices[0].message.content == asked[1].choices[0].message.content
    assert asked[0].usage.prompt_tokens == asked[1].usage.prompt_tokens


def test_a_content_part_that_is_not_text_is_refused_naming_it(server, client: openai.OpenAI) -> None:
    image = {"type": "image_url", "image_url": {"url": "data:image/png;base64,iVBORw0KGgo="}}
    messages = [{"role": "user", "content": [{"type": "text", "text": "What is this?"}, image]}]
    with pytest.raises(openai.BadRequestError) as caught:
        client.chat.completions.create(model="micro", messages=messages, max_tokens=4)
    assert "image_url" in caught.value.body["message"] and caught.value.body["param"] == "messages"
    reply = httpx.post(server[0] + "/v1/chat/completions", json={
        "model": "micro", "messages": [{"role": "user", "content": [{"type": "text"}]}]})
    assert reply.status_code == 400 and "text" in reply.json()["error"]["message"]
    after = client.chat.completions.create(model="micro", messages=[{"role": "user", "content": "hi"}], max_tokens=2)
    assert after.choices[0].finish_reason in ("stop", "length")  # and the server keeps serving


def test_a_classic_checkpoint_is_served_too(tmp_path: Path) -> None:
    """The classic model has no KV cache: the scheduler recomputes its rows, with the same answers."""
    with serving(make_checkpoint(tmp_path, arch="classic")) as (url, served, _):
        client = openai.OpenAI(base_url=url + "/v1", api_key="unused", max_retries=0)
        reply = client.completions.create(model="micro", prompt=PROMPT, max_tokens=20, temperature=0)
        _, text = engine_text(served, served.tokenizer.encode(PROMPT), 20, (served.tokenizer.eot_id,))
        assert reply.choices[0].text == text


def test_n_choices_and_several_prompts_are_numbered_like_openai(client: openai.OpenAI) -> None:
    reply = client.completions.create(model="micro", prompt=["class", "def"], n=3, max_tokens=8, temperature=1.0,
                                      seed=5)
    assert sorted(c.index for c in reply.choices) == list(range(6))
    assert len({c.text for c in reply.choices}) > 1  # n samples with their own seeds differ
    chunks = list(client.chat.completions.create(model="micro", messages=[{"role": "user", "content": "hi"}], n=3,
                                                 max_tokens=8, temperature=1.0, seed=5, stream=True))
    finished = [c.choices[0].index for c in chunks if c.choices and c.choices[0].finish_reason]
    assert sorted(finished) == [0, 1, 2]  # finish_reason exactly once per choice


def test_stop_strings_end_the_text_before_them(server, client: openai.OpenAI) -> None:
    full = client.completions.create(model="micro", prompt=PROMPT, max_tokens=30, temperature=0).choices[0].text
    stop = next(full[i : i + 2] for i in range(6, len(full) - 2) if full[i : i + 2] not in full[:i + 1])
    cut = full[: full.find(stop)]
    reply = client.completions.create(model="micro", prompt=PROMPT, max_tokens=30, temperature=0, stop=[stop, "@@@"])
    assert reply.choices[0].text == cut and reply.choices[0].finish_reason == "stop"
    streamed = list(client.completions.create(model="micro", prompt=PROMPT, max_tokens=30, temperature=0, stop=stop,
                                              stream=True))
    assert "".join(c.choices[0].text for c in streamed) == cut
    assert streamed[-1].choices[0].finish_reason == "stop"


def test_a_seed_reproduces_a_sample(client: openai.OpenAI) -> None:
    def sample(seed: int) -> str:
        return client.completions.create(model="micro", prompt=PROMPT, max_tokens=16, temperature=1.0, top_p=0.95,
                                         seed=seed).choices[0].text

    assert sample(11) == sample(11) != sample(12)


def test_logprobs_are_the_models_own_log_softmax(server, client: openai.OpenAI) -> None:
    url, served, _ = server
    reply = client.completions.create(model="micro", prompt=PROMPT, max_tokens=6, temperature=0, logprobs=3)
    logprobs = reply.choices[0].logprobs
    ids = served.tokenizer.encode(PROMPT)
    generated = Engine(served.model).generate([ids], 6, GREEDY)[0]
    for i, token in enumerate(generated):
        expected = log_softmax_of(served, ids + generated[:i])[-1]
        assert logprobs.token_logprobs[i] == pytest.approx(float(expected[token]), abs=1e-5)
        assert len(logprobs.top_logprobs[i]) == 3
        assert max(logprobs.top_logprobs[i].values()) == pytest.approx(logprobs.token_logprobs[i], abs=1e-6)
    messages = [{"role": "user", "content": "hi"}]
    chat = client.chat.completions.create(model="micro", messages=messages, max_tokens=4, temperature=0,
                                          logprobs=True, top_logprobs=2)
    chat_ids = served.chat_format.prompt_ids(messages)
    first = chat.choices[0].logprobs.content[0]
    expected = log_softmax_of(served, chat_ids)[-1]
    assert first.logprob == pytest.approx(float(expected.max()), abs=1e-5) and len(first.top_logprobs) == 2
    assert bytes(first.bytes) == served.tokenizer.token_bytes(int(expected.argmax()))


def test_echo_gives_the_prompt_log_likelihood(server, client: openai.OpenAI) -> None:
    """What lm-eval's log-likelihood tasks ask for: echo, no new tokens, the log-prob of every prompt token."""
    url, served, _ = server
    text = "class Point:\n    x: int = 0\n"
    ids = served.tokenizer.encode(text)
    expected = log_softmax_of(served, ids)[:-1].gather(1, torch.tensor(ids[1:])[:, None])[:, 0]
    for prompt in (text, ids):  # as text, and as token ids (lm-eval sends either)
        reply = client.completions.create(model="micro", prompt=prompt, max_tokens=0, echo=True, logprobs=1,
                                          temperature=0)
        choice = reply.choices[0]
        assert choice.text == text and choice.logprobs.token_logprobs[0] is None
        assert choice.logprobs.token_logprobs[1:] == pytest.approx(expected.tolist(), abs=1e-5)
        assert sum(choice.logprobs.token_logprobs[1:]) == pytest.approx(float(expected.sum()), abs=1e-5)
        assert reply.usage.prompt_tokens == len(ids) and reply.usage.completion_tokens == 0


def test_a_batch_of_token_id_prompts_echoes_every_prompts_log_probs(server, client: openai.OpenAI) -> None:
    """The legacy schema for each prompt of a batch: parallel `tokens`, `token_logprobs` (the first one null),
    `top_logprobs` and `text_offset`, then the one new token; a prompt that fills the window is scored with
    max_tokens 0, and refused when it asks for a token it has no room for."""
    url, served, _ = server
    texts = ["class Point:\n    x: int = 0\n", "def add(a, b):", "print('x')\n    return a + b\n"]
    prompts = [served.tokenizer.encode(text) for text in texts]
    reply = client.completions.create(model="micro", prompt=prompts, max_tokens=1, echo=True, logprobs=2,
                                      temperature=0)
    assert [c.index for c in reply.choices] == [0, 1, 2]
    for choice, text, ids in zip(reply.choices, texts, prompts, strict=True):
        logprobs, expected, n = choice.logprobs, log_softmax_of(served, ids), len(ids)
        assert choice.text.startswith(text) and len(logprobs.tokens) == n + 1
        assert logprobs.token_logprobs[0] is None and logprobs.top_logprobs[0] is None
        chosen = expected[:-1].gather(1, torch.tensor(ids[1:])[:, None])[:, 0]
        assert logprobs.token_logprobs[1:n] == pytest.approx(chosen.tolist(), abs=1e-5)
        assert logprobs.token_logprobs[n] == pytest.approx(float(expected[-1].max()), abs=1e-5)  # greedy token
        for top, row in zip(logprobs.top_logprobs[1:], expected, strict=True):
            assert sorted(top.values(), reverse=True) == pytest.approx(row.topk(2).values.tolist(), abs=1e-5)
        assert "".join(logprobs.tokens[:n]) == text
        assert logprobs.text_offset == [len("".join(logprobs.tokens[:i])) for i in range(n + 1)]
    assert (reply.usage.prompt_tokens, reply.usage.completion_tokens) == (sum(map(len, prompts)), 3)
    full = [served.tokenizer.encode(texts[0] * 8)[: served.window]]
    scored = client.completions.create(model="micro", prompt=full, max_tokens=0, echo=True, logprobs=1)
    assert len(scored.choices[0].logprobs.token_logprobs) == served.window
    with pytest.raises(openai.BadRequestError) as refused:
        client.completions.create(model="micro", prompt=full, max_tokens=1, echo=True, logprobs=1)
    assert refused.value.body["code"] == "context_length_exceeded"


def test_lm_evals_own_parser_reads_our_echo_replies(server) -> None:
    """lm-eval's `local-completions` sends a batch of token-id prompts with echo + 1 token + logprobs=1 and reads
    token_logprobs[ctxlen:-1]: through its own parser, each continuation's log-likelihood and greediness equal
    the in-process ones."""
    completions = pytest.importorskip("lm_eval.models.openai_completions")
    url, served, _ = server
    pairs = [("class Point:", "\n    x: int"), ("def add(a, b):", "\n    return a + b"), ("print(", "'x')")]
    pairs = [(served.tokenizer.encode(c), served.tokenizer.encode(x)) for c, x in pairs]
    body = {"model": "micro", "prompt": [c + x for c, x in pairs], "temperature": 0, "max_tokens": 1,
            "logprobs": 1, "seed": 1234, "echo": True}
    reply = httpx.post(url + "/v1/completions", json=body, timeout=30).json()
    parsed = completions.LocalCompletionsAPI.parse_logprobs(reply, ctxlens=[len(c) for c, _ in pairs])
    for (loglikelihood, greedy), (context, continuation) in zip(parsed, pairs, strict=True):
        logprobs = log_softmax_of(served, context + continuation)[len(context) - 1 : -1]
        targets = torch.tensor(continuation)
        assert loglikelihood == pytest.approx(float(logprobs.gather(1, targets[:, None]).sum()), abs=1e-5)
        assert greedy == bool((logprobs.argmax(-1) == targets).all())


def test_multibyte_characters_are_never_split_across_chunks(tmp_path: Path) -> None:
    """A model that recites emoji, CJK and accented text, whose tokens cut characters in pieces."""
    with serving(make_parrot_checkpoint(tmp_path)) as (url, served, _):
        tokens = served.tokenizer.encode(PARROT_TEXT)
        assert any(_not_utf8(served.tokenizer.token_bytes(t)) for t in tokens)  # the test means something
        client = openai.OpenAI(base_url=url + "/v1", api_key="unused", max_retries=0)
        expected = PARROT_TEXT[len("emoji"):]
        whole = client.completions.create(model="micro", prompt="emoji", max_tokens=len(tokens), temperature=0)
        assert whole.choices[0].text.startswith(expected)
        stream = client.completions.create(model="micro", prompt="emoji", max_tokens=len(tokens), temperature=0,
                                           stream=True)
        pieces = [c.choices[0].text for c in stream]
        # how many chunks depends on how far the client lags (a lagging stream's tokens leave together:
        # tests/test_serve_coalescing.py); whatever the cut, each chunk holds whole characters
        assert "".join(pieces) == whole.choices[0].text and not any("\ufffd" in p for p in pieces)


def _not_utf8(data: bytes) -> bool:
    try:
        data.decode("utf-8")
    except UnicodeDecodeError:
        return True
    return False


def test_bad_requests_get_openai_errors_and_the_server_keeps_serving(server, client: openai.OpenAI) -> None:
    url, _, _ = server
    good = dict(model="micro", prompt="x", max_tokens=2)
    bad_calls = [
        (404, lambda: client.completions.create(**{**good, "model": "gpt-4"})),
        (422, lambda: client.completions.create(**{**good, "max_tokens": -1})),
        (400, lambda: client.chat.completions.create(model="micro", messages=[])),
        (400, lambda: client.completions.create(**{**good, "prompt": "word " * 200})),
        (400, lambda: client.completions.create(**{**good, "prompt": [[1, 2], [10**6]]})),
        (422, lambda: client.completions.create(**{**good, "prompt": [[1, 2], "x"]})),
        (422, lambda: client.completions.create(**{**good, "logprobs": 21})),
        (422, lambda: client.completions.create(**{**good, "temperature": -1})),
        (422, lambda: client.completions.create(**{**good, "seed": 2**70})),
        (400, lambda: client.chat.completions.create(model="micro", messages=[{"role": "assistant", "content": "x"}])),
    ]
    for status, call in bad_calls:
        with pytest.raises(openai.APIStatusError) as caught:
            call()
        assert caught.value.status_code == status
        assert set(caught.value.body) == {"message", "type", "param", "code"}  # openai unwraps {"error": ...}
        assert client.completions.create(**good).choices[0].finish_reason in ("stop", "length")
    malformed = httpx.post(url + "/v1/completions", content=b'{"model": "micro", "prompt": ',
                           headers={"content-type": "application/json"})
    assert malformed.status_code == 400 and malformed.json()["error"]["type"] == "invalid_request_error"
    assert httpx.get(url + "/v1/nothing").status_code == 404
    assert client.completions.create(**good).usage.prompt_tokens == 1


@pytest.mark.parametrize(("route", "fields", "says"), [
    ("chat", {"temperature": 2.5}, "temperature: Input should be less than or equal to 2"),
    ("completions", {"temperature": 99}, "temperature: Input should be less than or equal to 2"),
    ("chat", {"top_p": 0}, "top_p: Input should be greater than 0"),
    ("chat", {"top_p": 1.5}, "top_p: Input should be less than or equal to 1"),
    ("chat", {"max_tokens": 0}, "max_tokens: Input should be greater than or equal to 1"),
    ("chat", {"max_completion_tokens": 0}, "max_completion_tokens: Input should be greater than or equal to 1"),
])
def test_sampling_outside_openais_ranges_is_a_422_naming_the_field(client: openai.OpenAI, route: str, fields: dict,
                                                                   says: str) -> None:
    """OpenAI's ranges: temperature in [0, 2], top_p in (0, 1], a chat reply of at least 1 token."""
    with pytest.raises(openai.UnprocessableEntityError) as caught:
        if route == "chat":
            client.chat.completions.create(model="micro", messages=[{"role": "user", "content": "hi"}], **fields)
        else:
            client.completions.create(model="micro", prompt="x", max_tokens=2, **fields)
    assert caught.value.body["message"] == says and caught.value.body["param"] == next(iter(fields))


def test_the_ends_of_openais_ranges_are_accepted(client: openai.OpenAI) -> None:
    chat = client.chat.completions.create(model="micro", messages=[{"role": "user", "content": "hi"}], temperature=2,
                                          top_p=1, max_tokens=1, max_completion_tokens=1)
    assert chat.usage.completion_tokens == 1
    scored = client.completions.create(model="micro", prompt="x y", max_tokens=0, echo=True, logprobs=1)
    assert scored.usage.completion_tokens == 0  # a completion may still ask for no token: it scores the prompt


def test_a_body_not_sent_as_json_is_a_415_naming_its_content_type(server) -> None:
    url, _, _ = server
    body = json.dumps({"model": "micro", "messages": [{"role": "user", "content": "hi"}], "max_tokens": 1})
    for route in ("/v1/chat/completions", "/v1/completions", "/admin/reload"):
        reply = httpx.post(url + route, content=body, headers={"content-type": "text/plain"})
        assert reply.status_code == 415, reply.text
        assert reply.json()["error"]["message"] == ("the body was sent as Content-Type 'text/plain': send it as "
                                                    "application/json")
    untyped = httpx.post(url + "/v1/chat/completions", content=body)
    assert untyped.status_code == 415 and "with no Content-Type" in untyped.json()["error"]["message"]
    typed = httpx.post(url + "/v1/chat/completions", content=body,
                       headers={"content-type": "application/json; charset=utf-8"})
    assert typed.status_code == 200


def test_an_api_key_is_required_when_set(tmp_path: Path) -> None:
    with serving(make_checkpoint(tmp_path), api_key="s3cret") as (url, _, _):
        with pytest.raises(openai.AuthenticationError):
            openai.OpenAI(base_url=url + "/v1", api_key="wrong", max_retries=0).models.list()
        assert httpx.get(url + "/v1/models").json()["error"]["code"] == "invalid_api_key"
        ok = openai.OpenAI(base_url=url + "/v1", api_key="s3cret", max_retries=0)
        assert ok.completions.create(model="micro", prompt="x", max_tokens=1).usage.completion_tokens <= 1
        assert httpx.get(url + "/health").status_code == 200


def slow_steps(scheduler, seconds: float = 0.01) -> None:
    """Make every scheduler step take a while, so a test can act in the middle of a stream."""
    step = scheduler.step

    def slowed() -> None:
        time.sleep(seconds)
        step()

    scheduler.step = slowed


def wait_for(predicate, timeout: float = 10.0) -> None:
    deadline = time.monotonic() + timeout
    while not predicate():
        if time.monotonic() > deadline:
            raise AssertionError("condition not met in time")
        time.sleep(0.02)


def test_a_client_that_disconnects_frees_its_slot(tmp_path: Path) -> None:
    with serving(make_checkpoint(tmp_path), wrap=slow_steps) as (url, served, _):
        def metric(name: str) -> float:
            return metric_value(httpx.get(url + "/metrics").text, name)

        # greedy: a sampled reply could end early (end-of-text) and finish before the client gives up
        body = {"model": "micro", "prompt": PROMPT, "max_tokens": 60, "stream": True, "temperature": 0}
        with httpx.stream("POST", url + "/v1/completions", json=body, timeout=30) as response:
            lines = response.iter_lines()
            first = next(line for line in lines if line.startswith("data: "))
            assert json.loads(first[6:])["choices"][0]["finish_reason"] is None
            assert metric("tinylm_requests_running") == 1
        wait_for(lambda: metric("tinylm_requests_running") == 0)
        assert metric('tinylm_requests_finished_total{reason="cancelled"}') == 1
        assert metric("tinylm_generation_tokens_total") < 60
        assert metric("tinylm_time_to_first_token_seconds_count") == 1
        with pytest.raises(httpx.ReadTimeout):  # a plain request whose client gives up while it waits
            httpx.post(url + "/v1/completions", json={**body, "stream": False}, timeout=0.3)
        wait_for(lambda: metric('tinylm_requests_finished_total{reason="cancelled"}') == 2)
        assert metric("tinylm_requests_running") == 0 and metric("tinylm_generation_tokens_total") < 120


def test_shutdown_lets_running_streams_finish(tmp_path: Path) -> None:
    """What SIGTERM does (uvicorn's handle_exit): stop accepting, drain the running stream, then stop."""
    with serving(make_checkpoint(tmp_path), wrap=slow_steps) as (url, served, http_server):
        body = {"model": "micro", "prompt": PROMPT, "max_tokens": 40, "stream": True, "temperature": 0}
        with httpx.stream("POST", url + "/v1/completions", json=body, timeout=30) as response:
            lines = response.iter_lines()
            next(line for line in lines if line.startswith("data: "))
            http_server.handle_exit(15, None)
            rest = [line for line in lines if line.startswith("data: ")]
        assert rest[-1] == "data: [DONE]" and json.loads(rest[-2][6:])["choices"][0]["finish_reason"] == "length"
        wait_for(lambda: not served.scheduler.thread.is_alive())
