"""Reading a generated turn back (reasoning, content, calls) and the tool loop, driven by a scripted 'model'."""

from __future__ import annotations

import json

import pytest

from tinylm.inference.tool_loop import run_with_tools
from tinylm.tasks.registry import get_task
from tinylm.tokenizer import train_bpe
from tinylm.tokenizer.chat_format import ChatFormat
from tinylm.tokenizer.chat_tokens import CALL, END_CALL, END_THINK, THINK
from tinylm.tokenizer.reply_parser import parse_reply
from tinylm.tools import get_tools


@pytest.fixture(scope="module")
def fmt() -> ChatFormat:
    return ChatFormat.from_tokenizer(train_bpe(["What is 347 * 582? calculator expression 0123456789"] * 5,
                                               vocab_size=300))


def spell(fmt: ChatFormat, *parts: str) -> list[int]:
    """Ids of a reply written as parts; an agent token's text becomes its id, anything else is text."""
    agent = fmt.agent_ids or {}
    return [i for part in parts for i in ([agent[part]] if part in agent else fmt.content_ids(part))]


def test_a_reply_reads_back_into_reasoning_content_and_calls(fmt: ChatFormat) -> None:
    ids = spell(fmt, THINK, "big product", END_THINK, "let me", CALL, 'calculator\n{"expression": "347*582"}', END_CALL)
    reply = parse_reply(fmt, ids)
    assert (reply.reasoning, reply.content) == ("big product", "let me")
    assert [(c.name, c.arguments, c.error) for c in reply.calls] == [("calculator", '{"expression": "347*582"}', None)]
    message = reply.message()
    # rendering the message gives back the ids the model wrote (when it wrote them canonically)
    assert fmt.render([{"role": "system", "content": "", "tools": get_tools("calculator")[0:0] or
                        [get_tools("calculator")[0].declaration()]}, {"role": "user", "content": "q"}, message]
                      ).ids[-len(ids) - 1:-1] == ids


@pytest.mark.parametrize(("parts", "error"), [
    ((CALL, 'calculator {"expression": "1"}', END_CALL), "the tool's name, a newline"),
    ((CALL, "calculator\n{expression}", END_CALL), "not JSON"),
    ((CALL, "calculator\n[1]", END_CALL), "must be a JSON object"),
    ((CALL, 'calculator\n{"expression": "1"}'), "never closed"),
])
def test_malformed_calls_are_kept_with_their_reason(fmt: ChatFormat, parts: tuple[str, ...], error: str) -> None:
    (call,) = parse_reply(fmt, spell(fmt, *parts)).calls
    assert call.error is not None and error in call.error


def test_text_that_looks_like_a_call_is_only_text(fmt: ChatFormat) -> None:
    reply = parse_reply(fmt, fmt.content_ids('<|call|>calculator\n{"expression": "1"}<|/call|>'))
    assert reply.calls == [] and reply.content.startswith("<|call|>")


class Scripted:
    """A 'model' that answers each round from a script, and records the prompts it was given."""

    def __init__(self, fmt: ChatFormat, rounds: list[list[list[int]]]) -> None:
        self.fmt, self.rounds, self.prompts = fmt, rounds, []

    def __call__(self, ids: list[list[int]], limits: list[int], rows: list[int]) -> list[list[int]]:
        assert len(rows) == len(ids)
        self.prompts.append(ids)
        return [reply[:limit] for reply, limit in zip(self.rounds.pop(0), limits, strict=True)]


def test_the_loop_runs_calls_appends_results_and_keeps_the_ids(fmt: ChatFormat) -> None:
    hard = next(e for e in get_task("builtin:calc").examples("test", 40) if e.key.startswith("hard"))
    easy = next(e for e in get_task("builtin:calc").examples("test", 40) if e.key.startswith("easy"))
    expression = hard.key.removeprefix("hard:")
    call = spell(fmt, CALL, "calculator\n" + json.dumps({"expression": expression}), END_CALL)
    answer = fmt.content_ids(hard.answer)
    model = Scripted(fmt, [[call, fmt.content_ids(easy.answer)], [answer]])
    hard_run, easy_run = run_with_tools(model, fmt, [hard.prompt, easy.prompt], get_tools("calculator"),
                                        max_new_tokens=40, window=1024)
    assert easy_run.final == easy.answer and easy_run.calls == 0 and len(model.prompts[1]) == 1
    assert hard_run.final == hard.answer and hard_run.calls == 1 and hard_run.failed_calls == 0
    assert [m["role"] for m in hard_run.messages] == ["assistant", "tool", "assistant"]
    assert hard_run.messages[1]["content"] == hard.answer  # the calculator's result
    # the second round's prompt is the first round's ids, the tool turn and the assistant header
    tool_turn = [fmt.role_ids["tool"], *fmt.content_ids(hard.answer), fmt.end_id]
    assert model.prompts[1][0] == [*model.prompts[0][0], *call, fmt.end_id, *tool_turn, fmt.role_ids["assistant"]]
    # the policy mask is 1 exactly on what the model generated (its end token included), never on the result
    generated = [t for t, p in zip(hard_run.ids, hard_run.policy) if p]
    assert generated == [*call, fmt.end_id, *answer, fmt.end_id] and len(hard_run.policy) == len(hard_run.ids)
    # and the context equals the rendered trace (the reference trajectory, written canonically)
    trace = fmt.render(list(hard.messages)).ids
    assert hard_run.ids == trace


def test_failures_are_results_and_limits_stop_the_loop(fmt: ChatFormat) -> None:
    prompt = get_task("builtin:calc?hard_share=1.0").examples("test", 1)[0].prompt
    bad = spell(fmt, CALL, "calculator\n{oops}", END_CALL)
    unknown = spell(fmt, CALL, 'wolfram\n{"q": "1"}', END_CALL)
    model = Scripted(fmt, [[bad], [unknown], [bad]])
    (run,) = run_with_tools(model, fmt, [prompt], get_tools("calculator"), max_new_tokens=40, window=1024,
                            max_turns=3)
    assert run.stopped == "turns" and run.final == "" and (run.calls, run.failed_calls) == (2, 2)
    results = [m["content"] for m in run.messages if m["role"] == "tool"]
    assert results[0].startswith("error: malformed call: the arguments are not JSON")
    assert results[1] == "error: no tool named 'wolfram' (available: calculator)"
    # a window with no room left ends the conversation instead of overflowing it
    (short,) = run_with_tools(Scripted(fmt, []), fmt, [prompt], [], max_new_tokens=8, window=10)
    assert short.stopped == "window" and short.messages == []
    # a reply cut by the token limit is closed, but its end token is not the model's
    (cut,) = run_with_tools(Scripted(fmt, [[fmt.content_ids("123456789")]]), fmt, [prompt], [], max_new_tokens=2,
                            window=1024)
    assert cut.policy[-1] == 0 and sum(cut.policy) == 2
