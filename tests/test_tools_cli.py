"""`tinylm chat --tools` and `tinylm generate --chat --tools`: the model's calls run between rounds, each call and
its result is shown, the result goes back as a tool turn, and the next prompt is the whole conversation in the
chat format. The 'model' is scripted (a random tiny network never calls a tool on purpose); the CLI, the
session, the parser and the tools are the real ones."""

from __future__ import annotations

import io
import json
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from test_generate_cli import make_run
from tinylm.checkpoint import load_model, save_checkpoint
from tinylm.cli.main import main
from tinylm.inference.engine import Engine
from tinylm.tokenizer.chat_format import ChatFormat
from tinylm.tokenizer.chat_tokens import CALL, END_CALL
from tinylm.tools import get_tools, tool_declarations

QUESTION = "What is 347 * 582?"
ARGUMENTS = json.dumps({"expression": "347 * 582"})


@pytest.fixture(scope="module")
def chat_run(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A random tiny model whose checkpoint carries a chat template with the agent tokens: a 'chat model'."""
    root = tmp_path_factory.mktemp("tools-cli")
    base = make_run(root, context_length=512)
    model, tokenizer, _ = load_model(base)
    chat = ChatFormat.from_tokenizer(tokenizer)
    assert chat.speaks_tools
    tokenizer_file = tokenizer.save(root / "chat-tokenizer.json")
    save_checkpoint(root / "chat", 5, model, model.config, tokenizer_file=tokenizer_file,
                    meta={"chat_template": chat.jinja_template()})
    return root / "chat"


def chat_of(run: Path) -> ChatFormat:
    return ChatFormat.from_tokenizer(load_model(run)[1])


def call_then_answer(chat: ChatFormat) -> list[list[int]]:
    """Round 1: one calculator call; round 2: the answer (the engine never returns the stop token that ended one)."""
    agent = chat.agent_ids or {}
    call = [agent[CALL], *chat.content_ids("calculator\n" + ARGUMENTS), agent[END_CALL]]
    return [call, chat.content_ids("201954")]


def expected_second_prompt(chat: ChatFormat, system: str | None = None) -> list[int]:
    """The conversation after the tool ran, rendered from messages: what the model must be prompted with."""
    head = {"role": "system", "content": system or "", "tools": tool_declarations(get_tools("calculator"))}
    call = {"id": "call_0", "type": "function", "function": {"name": "calculator", "arguments": ARGUMENTS}}
    return chat.prompt_ids([head, {"role": "user", "content": QUESTION},
                            {"role": "assistant", "content": "", "tool_calls": [call]},
                            {"role": "tool", "content": "201954"}])


def test_chat_runs_the_call_and_prompts_again_with_the_result(chat_run: Path, monkeypatch, capsys) -> None:
    chat = chat_of(chat_run)
    rounds, prompts = call_then_answer(chat), []

    def scripted(self: Engine, ids: list[int], *args: Any, **kwargs: Any) -> Iterator[int]:
        prompts.append(list(ids))
        yield from rounds.pop(0)

    monkeypatch.setattr(Engine, "stream", scripted)
    monkeypatch.setattr(sys, "stdin", io.StringIO(QUESTION + "\n"))
    assert main(["chat", "--checkpoint", str(chat_run), "--tools", "calculator", "--system", "Be exact.",
                 "--temperature", "0", "--max-new-tokens", "64"]) == 0
    out, err = capsys.readouterr()
    assert f"tinylm: calculator({ARGUMENTS}) -> 201954" in err.splitlines()
    assert out == "201954\n" and rounds == []  # one line for the turn: the answer, never the call markup
    # the first prompt declares the tool on the system turn; the second is the conversation with the result
    head = {"role": "system", "content": "Be exact.", "tools": tool_declarations(get_tools("calculator"))}
    assert prompts[0] == chat.prompt_ids([head, {"role": "user", "content": QUESTION}])
    assert prompts[1] == expected_second_prompt(chat, "Be exact.")


def test_the_readme_example_answers_when_less_than_the_default_reply_length_is_left(
        tmp_path_factory: pytest.TempPathFactory, monkeypatch, capsys) -> None:
    """README: `echo 'What is 347 * 582?' | tinylm chat --checkpoint runs/calc-sft --tools calculator`. The tiny
    preset's window is 256 tokens and a reply may take 128 by default; with the tool declared, the call and its
    result, less than 128 are left for the answer. The answer gets the room that is left, not a refusal. (This
    test tokenizer spells the declaration in more tokens than the tiny preset's, so its window is 384.)"""
    window = 384
    root = tmp_path_factory.mktemp("tools-window")
    base = make_run(root, context_length=window)
    model, tokenizer, _ = load_model(base)
    chat = ChatFormat.from_tokenizer(tokenizer)
    save_checkpoint(root / "calc-sft", 5, model, model.config, tokenizer_file=tokenizer.save(root / "tok.json"),
                    meta={"chat_template": chat.jinja_template()})
    system = ""  # padded until the conversation after the result leaves 40-100 tokens: less than the 128 asked
    while window - len(expected_second_prompt(chat, system)) > 100:
        system += "Be exact. "
    left = window - len(expected_second_prompt(chat, system))
    assert 1 <= left < 128
    rounds, limits = call_then_answer(chat), []

    def scripted(self: Engine, ids: list[int], limit: int, *args: Any, **kwargs: Any) -> Iterator[int]:
        limits.append((len(ids), limit))
        yield from rounds.pop(0)

    monkeypatch.setattr(Engine, "stream", scripted)
    monkeypatch.setattr(sys, "stdin", io.StringIO(QUESTION + "\n"))
    assert main(["chat", "--checkpoint", str(root / "calc-sft"), "--tools", "calculator", "--system", system,
                 "--temperature", "0"]) == 0
    out, err = capsys.readouterr()
    assert out == "201954\n", err
    assert limits[0][1] == 128 and limits[1] == (window - left, left)  # the answer gets exactly the room left
    assert "no room" not in err


def test_a_line_that_cannot_be_answered_is_an_empty_line_so_a_script_stays_aligned(chat_run: Path, monkeypatch,
                                                                                    capsys) -> None:
    chat = chat_of(chat_run)
    rounds = [chat.content_ids("4")]

    def scripted(self: Engine, ids: list[int], *args: Any, **kwargs: Any) -> Iterator[int]:
        yield from rounds.pop(0)

    monkeypatch.setattr(Engine, "stream", scripted)
    monkeypatch.setattr(sys, "stdin", io.StringIO("What is 2 + 2? " * 200 + "\nWhat is 2 + 2?\n"))
    assert main(["chat", "--checkpoint", str(chat_run), "--temperature", "0"]) == 0
    out, err = capsys.readouterr()
    assert out == "\n4\n" and "write a shorter message" in err


def test_generate_prints_the_final_answer_and_the_calls_on_stderr(chat_run: Path, monkeypatch, capsys) -> None:
    chat = chat_of(chat_run)
    rounds, prompts = call_then_answer(chat), []

    def scripted(self: Engine, ids: list[list[int]], limits: Any, *args: Any, **kwargs: Any) -> list[list[int]]:
        prompts.append([list(p) for p in ids])
        return [rounds.pop(0)]

    monkeypatch.setattr(Engine, "generate", scripted)
    assert main(["generate", "--checkpoint", str(chat_run), "--chat", "--tools", "calculator", "--prompt", QUESTION,
                 "--temperature", "0", "--max-new-tokens", "64"]) == 0
    out, err = capsys.readouterr()
    assert out == "201954\n"
    assert f"tinylm: calculator({ARGUMENTS})" in err and "tinylm: -> 201954" in err
    assert prompts[1][0] == expected_second_prompt(chat)


def test_a_failing_call_is_an_error_result_the_model_sees(chat_run: Path, monkeypatch, capsys) -> None:
    chat = chat_of(chat_run)
    agent = chat.agent_ids or {}
    bad = [agent[CALL], *chat.content_ids('calculator\n{"expression": "1/0"}'), agent[END_CALL]]
    rounds, prompts = [bad, chat.content_ids("sorry")], []

    def scripted(self: Engine, ids: list[int], *args: Any, **kwargs: Any) -> Iterator[int]:
        prompts.append(list(ids))
        yield from rounds.pop(0)

    monkeypatch.setattr(Engine, "stream", scripted)
    monkeypatch.setattr(sys, "stdin", io.StringIO("divide\n"))
    assert main(["chat", "--checkpoint", str(chat_run), "--tools", "calculator", "--temperature", "0"]) == 0
    err = capsys.readouterr().err
    shown = next(line for line in err.splitlines() if line.startswith("tinylm: calculator("))
    result = shown.split(" -> ", 1)[1]
    assert result.startswith("error:") and "zero" in result
    tool_turn = [chat.role_ids["tool"], *chat.content_ids(result), chat.end_id, chat.role_ids["assistant"]]
    assert prompts[1][-len(tool_turn):] == tool_turn


@pytest.mark.parametrize(("command", "message"), [
    (["generate", "--tools", "calculator", "--prompt", "hi"], "--tools needs --chat"),
    (["generate", "--chat", "--tools", "wolfram", "--prompt", "hi"], "wolfram"),
    (["chat", "--tools", "calculator"], "is a base model"),
])
def test_tools_where_they_cannot_work_are_one_line(command: list[str], message: str, chat_run: Path,
                                                   monkeypatch, capsys) -> None:
    run = chat_run.parent / "run" if command[0] == "chat" else chat_run  # make_run's base model, no template
    monkeypatch.setattr(sys, "stdin", io.StringIO("hi\n"))
    assert main([command[0], "--checkpoint", str(run), *command[1:]]) == 1
    err = capsys.readouterr().err.strip().splitlines()
    assert err[-1].startswith("tinylm: error:") and message in err[-1]
