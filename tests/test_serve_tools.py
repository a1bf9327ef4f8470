"""Serving tools through the official `openai` client: calls come back as `tool_calls`, reasoning as its own field,
and calls to the server's built-in tools (`tinylm serve --tools`) run there.

The model is a hand-written bigram (tests/chat_stop_support.py) whose greedy reply after the
assistant header is known: <|think|>hm<|/think|> weigh<|call|>add\\n{"a": 2}<|/call|><|end|>. Where the
prompt ends decides where it joins that chain, so tool_choice "required" (the prompt ends with <|call|>)
and a named function (<|call|>add\\n) are seen to be honoured, and "none" (<|call|> is a stop) too.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from contextlib import contextmanager
from pathlib import Path

import openai
import pytest

from chat_stop_support import chat_checkpoint
from serve_support import CORPUS, serving
from tinylm.tokenizer import Tokenizer
from tinylm.tokenizer.chat_format import ChatFormat
from tinylm.tools import get_tools

pytestmark = pytest.mark.usefixtures("one_thread")

ADD = {"type": "function", "function": {"name": "add", "description": "adds",
                                        "parameters": {"type": "object", "properties": {"a": {"type": "integer"}}}}}
OTHER = {"type": "function", "function": {"name": "su", "parameters": {"type": "object", "properties": {}}}}
TOOLS = [ADD, OTHER]
ASK = [{"role": "user", "content": "What is 2 plus 2?"}]
SERVER_CALL = 'calculator\n{"expression": "2*3"}'
TOOL_CORPUS = CORPUS + ['add\n{"a": 2} hm weigh'] * 30 + [SERVER_CALL] * 30


def pieces(tokenizer: Tokenizer, *texts: str) -> list[int]:
    return [i for text in texts for i in tokenizer.encode_ordinary(text)]


def calling_chain(tokenizer: Tokenizer) -> list[int]:
    agent = tokenizer.special_tokens
    return [agent["<|think|>"], *pieces(tokenizer, "hm"), agent["<|/think|>"], *pieces(tokenizer, " weigh"),
            agent["<|call|>"], *pieces(tokenizer, "add", "\n", '{"a": 2}'), agent["<|/call|>"], agent["<|end|>"]]


def malformed_chain(tokenizer: Tokenizer) -> list[int]:
    agent = tokenizer.special_tokens
    return [*pieces(tokenizer, " weigh"), agent["<|call|>"], *pieces(tokenizer, "add", "\n", '{"a'),
            agent["<|/call|>"], agent["<|end|>"]]


@contextmanager
def bigram_server(root: Path, chain_of, name: str, tools: str | None = None
                  ) -> Iterator[tuple[openai.OpenAI, ChatFormat]]:
    """An `openai` client of a server of the bigram whose greedy reply is `chain_of`, running `tools` itself."""
    run_dir, tokenizer = chat_checkpoint(root, chain_of, name, TOOL_CORPUS, context_length=512)
    with serving(run_dir) as (url, served, _):
        served.tools = get_tools(tools)
        yield (openai.OpenAI(base_url=url + "/v1", api_key="unused", max_retries=0, timeout=60),
               ChatFormat.from_tokenizer(tokenizer))


@pytest.fixture(scope="module")
def served(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[openai.OpenAI, ChatFormat]]:
    with bigram_server(tmp_path_factory.mktemp("serve-tools"), calling_chain, "caller") as server:
        yield server


def ask(client: openai.OpenAI, messages=ASK, **options):
    options.setdefault("max_tokens", 40)
    return client.chat.completions.create(model="micro", messages=messages, temperature=0, **options)


def test_a_call_comes_back_as_tool_calls_with_the_reasoning_apart(served) -> None:
    client, _ = served
    choice = ask(client, tools=TOOLS).choices[0]
    assert choice.finish_reason == "tool_calls"
    assert choice.message.content == " weigh"
    assert choice.message.model_extra["reasoning_content"] == "hm"
    [call] = choice.message.tool_calls
    assert call.type == "function" and call.function.name == "add"
    assert json.loads(call.function.arguments) == {"a": 2} and call.id.startswith("call_")


def test_the_client_runs_the_tool_and_sends_the_result_back(served) -> None:
    client, chat = served
    first = ask(client, tools=TOOLS).choices[0].message
    history = [*ASK, first.model_dump(exclude_none=True),
               {"role": "tool", "tool_call_id": first.tool_calls[0].id, "content": "4"}]
    reply = ask(client, history, tools=TOOLS)
    # the server rendered the call it made and the result the client ran, exactly as the chat format does
    expected = chat.prompt_ids([*ASK, {"role": "assistant", "content": " weigh", "reasoning_content": "hm",
                                       "tool_calls": [{"type": "function", "function": {
                                           "name": "add", "arguments": '{"a": 2}'}}]},
                                {"role": "tool", "content": "4"}], TOOLS)
    assert reply.usage.prompt_tokens == len(expected)
    assert reply.choices[0].message.tool_calls[0].function.name == "add"  # a bigram asks again


def test_a_stream_says_the_same_as_the_whole_reply(served) -> None:
    client, _ = served
    chunks = list(ask(client, tools=TOOLS, stream=True))
    content = "".join(c.choices[0].delta.content or "" for c in chunks)
    reasoning = "".join((c.choices[0].delta.model_extra or {}).get("reasoning_content", "") for c in chunks)
    calls = [call for c in chunks for call in c.choices[0].delta.tool_calls or []]
    assert (content, reasoning) == (" weigh", "hm")
    [call] = calls  # a call leaves whole, once it is closed
    assert (call.index, call.function.name, json.loads(call.function.arguments)) == (0, "add", {"a": 2})
    assert [c.choices[0].finish_reason for c in chunks if c.choices[0].finish_reason] == ["tool_calls"]


def test_tool_choice_none_required_and_named(served) -> None:
    client, _ = served
    none = ask(client, tools=TOOLS, tool_choice="none").choices[0]
    assert (none.message.content, none.message.tool_calls, none.finish_reason) == (" weigh", None, "stop")
    required = ask(client, tools=TOOLS, tool_choice="required").choices[0]
    assert required.message.model_extra.get("reasoning_content") is None  # it started at <|call|>
    assert required.finish_reason == "tool_calls" and required.message.tool_calls[0].function.name == "add"
    named = ask(client, tools=TOOLS, tool_choice={"type": "function", "function": {"name": "su"}}).choices[0]
    # the prompt wrote "su\n"; the bigram joins its chain at "\n" and writes add's arguments
    [call] = named.message.tool_calls
    assert (call.function.name, json.loads(call.function.arguments)) == ("su", {"a": 2})
    plain = ask(client).choices[0]  # no tools declared: nothing to call, so <|call|> ends the reply
    assert (plain.message.content, plain.message.tool_calls, plain.finish_reason) == (" weigh", None, "stop")


@pytest.mark.parametrize(("options", "says"), [
    ({"tools": TOOLS, "tool_choice": {"type": "function", "function": {"name": "nope"}}}, "naming a declared tool"),
    ({"tool_choice": "required"}, "declares no tools"),
    ({"tools": [{"type": "function", "function": {"description": "no name"}}]}, "tool 1 is not"),
    ({"tools": [ADD, {"type": "retrieval", "retrieval": {}}]}, "tool 2 is of type 'retrieval'"),
    ({"tools": [{"type": "function", "function": {"name": "w", "parameters": "notanobject"}}]},
     "tool 1 ('w'): parameters must be a JSON Schema object, got str"),
    ({"tools": [{"type": "function", "function": {"name": "w", "parameters": {"type": "string"}}}]},
     "tool 1 ('w'): parameters must be a JSON Schema of type 'object', got 'string'"),
    ({"tools": [{"type": "function", "function": {"name": "a b\nc<|call|>"}}]},
     "tool 1: the name 'a b\\nc<|call|>' does not match ^[a-zA-Z0-9_-]{1,64}$"),
    ({"tools": [{"type": "function", "function": {"name": "x" * 65}}]}, "does not match ^[a-zA-Z0-9_-]{1,64}$"),
    ({"messages": [*ASK, {"role": "tool", "content": "4"}]}, "a tool result with no tool call before it"),
    ({"messages": [*ASK, {"role": "assistant", "tool_calls": [{"id": "c", "type": "function", "function": {
        "name": "a b", "arguments": "{}"}}]}, {"role": "tool", "content": "4"}]},
     "message 2: the call's name 'a b' does not match ^[a-zA-Z0-9_-]{1,64}$"),
])
def test_a_bad_tool_request_is_a_400_and_the_server_keeps_serving(served, options, says: str) -> None:
    client, _ = served
    with pytest.raises(openai.BadRequestError) as error:
        ask(client, **options)
    assert says in str(error.value)
    assert ask(client, tools=TOOLS).choices[0].finish_reason == "tool_calls"


def test_a_history_may_call_tools_the_request_no_longer_declares(served) -> None:
    """A client that drops `tools` once its calls are done can go on: the calls and results render as history,
    and nothing is declared, so the model cannot call again (<|call|> ends its reply)."""
    client, chat = served
    first = ask(client, tools=TOOLS).choices[0].message
    history = [*ASK, first.model_dump(exclude_none=True),
               {"role": "tool", "tool_call_id": first.tool_calls[0].id, "content": "4"}]
    reply = ask(client, history)
    rendered = chat.render([*ASK, {"role": "assistant", "content": " weigh", "reasoning_content": "hm",
                                   "tool_calls": [{"type": "function", "function": {
                                       "name": "add", "arguments": '{"a": 2}'}}]},
                            {"role": "tool", "content": "4"}], check=False)
    assert reply.usage.prompt_tokens == len(rendered.ids) + 1  # + <|assistant|>; no "Tools:" in the system turn
    choice = reply.choices[0]
    assert (choice.message.content, choice.message.tool_calls, choice.finish_reason) == (" weigh", None, "stop")


def test_a_call_to_a_tool_the_request_does_not_declare_stays_text(served) -> None:
    """The bigram calls 'add' whatever is declared: with only 'su' declared, no client could run that call."""
    client, _ = served
    choice = ask(client, tools=[OTHER]).choices[0]
    assert (choice.message.content, choice.message.tool_calls, choice.finish_reason) == (
        ' weighadd\n{"a": 2}', None, "stop")
    streamed = list(ask(client, tools=[OTHER], stream=True))
    assert "".join(c.choices[0].delta.content or "" for c in streamed) == ' weighadd\n{"a": 2}'
    assert not [c for c in streamed if c.choices[0].delta.tool_calls]


def test_sixteen_at_once_answer_as_one_at_a_time(served) -> None:
    client, _ = served
    alone = ask(client, tools=TOOLS).choices[0].message
    with ThreadPoolExecutor(16) as pool:
        together = list(pool.map(lambda _: ask(client, tools=TOOLS).choices[0].message, range(16)))
    strip = lambda m: (m.content, m.model_extra.get("reasoning_content"),  # noqa: E731
                       [(c.function.name, c.function.arguments) for c in m.tool_calls])
    assert all(strip(m) == strip(alone) for m in together)
    assert len({c.id for m in together for c in m.tool_calls}) == 16  # every call has its own id


def test_a_call_that_is_not_json_or_never_closes_stays_text(tmp_path: Path) -> None:
    with bigram_server(tmp_path, malformed_chain, "fumbler") as (client, _):
        choice = ask(client, tools=TOOLS).choices[0]
        assert (choice.message.content, choice.message.tool_calls) == (' weighadd\n{"a', None)
        assert choice.finish_reason == "stop"
        cut = ask(client, tools=TOOLS, max_tokens=6).choices[0]  # " weigh" <|call|> "add" "\n", then cut off
        assert (cut.message.content, cut.message.tool_calls, cut.finish_reason) == (" weighadd\n", None, "length")
        streamed = list(ask(client, tools=TOOLS, stream=True))
        assert "".join(c.choices[0].delta.content or "" for c in streamed) == ' weighadd\n{"a'


def answering_chain(tokenizer: Tokenizer) -> list[int]:
    """After the assistant header: " weigh" and the end; after <|call|> (tool_choice "required"): a calculator
    call, closed and ended with end-of-text (also a stop: <|end|> already has its follower)."""
    agent = tokenizer.special_tokens
    return [*pieces(tokenizer, " weigh"), agent["<|end|>"], agent["<|call|>"], *pieces(tokenizer, SERVER_CALL),
            agent["<|/call|>"], agent["<|endoftext|>"]]


def server_calling_chain(tokenizer: Tokenizer) -> list[int]:
    """After the assistant header, whatever came before: reasoning, then a call to the calculator. A server that
    runs it goes round MAX_TURNS times (every round calls again), and the last round's call goes back as
    `tool_calls`: a reply with every kind of piece, for the chat pages."""
    agent = tokenizer.special_tokens
    return [agent["<|think|>"], *pieces(tokenizer, "hm"), agent["<|/think|>"], agent["<|call|>"],
            *pieces(tokenizer, SERVER_CALL), agent["<|/call|>"], agent["<|end|>"]]


@pytest.fixture(scope="module")
def runner(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[openai.OpenAI, ChatFormat]]:
    """A server that runs the calculator itself."""
    with bigram_server(tmp_path_factory.mktemp("serve-builtin"), answering_chain, "runner", "calculator") as server:
        yield server


def test_the_server_runs_its_builtin_tool_and_the_model_goes_on(runner) -> None:
    client, chat = runner
    reply = ask(client, tool_choice="required", extra_body={"builtin_tools": ["calculator"]})
    choice = reply.choices[0]
    assert (choice.message.content, choice.message.tool_calls, choice.finish_reason) == (" weigh", None, "stop")
    call, result = choice.message.model_extra["tool_messages"]
    assert call["role"] == "assistant" and call["tool_calls"][0]["function"] == {
        "name": "calculator", "arguments": '{"expression": "2*3"}'}
    assert result == {"role": "tool", "tool_call_id": call["tool_calls"][0]["id"], "content": "6"}
    # two rounds: the prompt forced into a call, then the conversation with the call and its result
    declared = get_tools("calculator")[0].declaration()
    first = chat.prompt_ids(ASK, [declared])
    second = chat.prompt_ids([*ASK, {"role": "assistant", "content": "", "tool_calls": call["tool_calls"]},
                              {"role": "tool", "content": "6"}], [declared])
    assert reply.usage.prompt_tokens == len(first) + 1 + len(second)  # + the forced <|call|>
    assert reply.usage.completion_tokens == len(chat.content_ids(SERVER_CALL)) + 2 + 4  # ... <|/call|> <|eot|>


def test_a_stream_runs_the_tools_too_and_says_the_same(runner) -> None:
    client, _ = runner
    chunks = list(ask(client, tool_choice="required", stream=True, extra_body={"builtin_tools": ["calculator"]}))
    assert "".join(c.choices[0].delta.content or "" for c in chunks) == " weigh"
    added = [m for c in chunks for m in (c.choices[0].delta.model_extra or {}).get("tool_messages", [])]
    assert [m["role"] for m in added] == ["assistant", "tool"] and added[1]["content"] == "6"
    assert [c.choices[0].finish_reason for c in chunks if c.choices[0].finish_reason] == ["stop"]


def test_a_call_to_the_clients_own_tool_goes_back_to_the_client(runner) -> None:
    client, _ = runner
    choice = ask(client, tools=[ADD], tool_choice={"type": "function", "function": {"name": "add"}},
                 extra_body={"builtin_tools": ["calculator"]}).choices[0]
    [call] = choice.message.tool_calls  # "add\n" was forced; the bigram goes on with the calculator's arguments
    assert (call.function.name, json.loads(call.function.arguments)) == ("add", {"expression": "2*3"})
    assert choice.finish_reason == "tool_calls" and choice.message.model_extra["tool_messages"] == []


@pytest.mark.parametrize(("options", "says"), [
    ({"extra_body": {"builtin_tools": ["python"]}}, "runs no built-in tool 'python' (it runs calculator)"),
    ({"n": 2, "extra_body": {"builtin_tools": ["calculator"]}}, "n must be 1"),
    ({"tools": [{"type": "function", "function": {"name": "calculator"}}],
      "extra_body": {"builtin_tools": ["calculator"]}}, "both a built-in tool and one the request declares"),
])
def test_a_builtin_tool_the_server_cannot_run_is_a_400(runner, options, says: str) -> None:
    client, _ = runner
    with pytest.raises(openai.BadRequestError) as error:
        ask(client, **options)
    assert says in str(error.value)


def test_a_server_without_builtin_tools_says_how_to_start_one(served) -> None:
    client, _ = served
    with pytest.raises(openai.BadRequestError) as error:
        ask(client, extra_body={"builtin_tools": ["calculator"]})
    assert "tinylm serve --tools" in str(error.value)


def test_the_models_list_says_which_builtin_tools_the_server_runs(runner, served) -> None:
    assert [m.model_extra["builtin_tools"] for m in runner[0].models.list().data] == [["calculator"]]
    assert [m.model_extra["builtin_tools"] for m in served[0].models.list().data] == [[]]
