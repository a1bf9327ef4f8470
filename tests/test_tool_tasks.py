"""builtin:calc (hard products for the calculator, easy ones answered directly) and builtin:addition's scratchpad."""

from __future__ import annotations

import re

import pytest

from tinylm.errors import TinyLMError
from tinylm.tasks.calc import hard
from tinylm.tasks.registry import get_task
from tinylm.tokenizer import train_bpe
from tinylm.tokenizer.chat_format import ChatFormat
from tinylm.tools import get_tools, run_call
from tinylm.tools.calculator import calculate


@pytest.fixture(scope="module")
def fmt() -> ChatFormat:
    return ChatFormat.from_tokenizer(train_bpe(["What is 347 * 582? calculator expression 0123456789"] * 5,
                                               vocab_size=300))


def test_calc_traces_call_the_calculator_for_hard_problems_only(fmt: ChatFormat) -> None:
    task = get_task("builtin:calc")
    examples = task.examples("train", 200, seed=3)
    assert sum(map(hard, examples)) == 100 and len({e.key for e in examples if hard(e)}) == 100
    tools = get_tools("calculator")
    for example in examples:
        system, user = example.prompt
        assert system["tools"][0]["function"]["name"] == "calculator" and user["role"] == "user"
        a, op, b = re.fullmatch(r"What is (\d+) ([*+]) (\d+)\?", user["content"]).groups()
        fmt.validate(list(example.messages))  # a well-formed conversation: declared tool, a result per call
        if hard(example):
            assert op == "*" and 100 <= int(a) <= 999 and 100 <= int(b) <= 999
            _, _, called, result, final = example.messages
            (call,) = called["tool_calls"]
            # the trace's tool result is what the tool itself returns for the call
            assert result["content"] == run_call("calculator", call["function"]["arguments"], tools).content
            assert final["content"] == example.answer == calculate(f"{a}{op}{b}")
        else:
            assert int(a) < 10 and int(b) < 10 and len(example.messages) == 3
        assert task.verify(example.messages[-1]["content"], example)
        assert not task.verify(str(int(example.answer) + 1), example)


def test_calc_splits_are_disjoint_and_the_baseline_has_no_tool() -> None:
    task = get_task("builtin:calc")
    train = {e.key for e in task.examples("train", 400) if hard(e)}
    test = {e.key for e in task.examples("test", 100) if hard(e)}
    assert train and test and not train & test
    direct = get_task("builtin:calc?tool=0").examples("test", 50)
    assert {e.key for e in direct} == {e.key for e in task.examples("test", 50)}
    assert all(len(e.messages) == 2 and e.messages[-1]["content"] == e.answer for e in direct)
    assert all(hard(e) for e in get_task("builtin:calc?hard_share=1.0").examples("test", 20))


def test_calc_even_lengths_balances_the_train_split_and_leaves_held_out_problems_alone() -> None:
    natural, even = get_task("builtin:calc?hard_share=1"), get_task("builtin:calc?hard_share=1&even_lengths=1")
    all_products = [a * b for a in range(100, 1000) for b in range(100, 1000)]
    natural_short = sum(p < 10**5 for p in all_products) / len(all_products)  # 0.174: 5-digit products are rare

    def short_share(examples: list) -> float:
        return sum(len(e.answer) == 5 for e in examples) / len(examples)

    assert 0.15 < short_share(natural.examples("train", 2000, seed=4)) < 0.20 and 0.17 < natural_short < 0.18
    balanced = even.examples("train", 2000, seed=4)
    assert 0.46 < short_share(balanced) < 0.54 and {len(e.answer) for e in balanced} == {5, 6}
    assert all(hard(e) and e.messages[-1]["content"] == e.answer for e in balanced)
    assert len({e.key for e in balanced}) == 2000
    test_keys = {e.key for e in natural.examples("test", 300)}
    assert not {e.key for e in balanced} & test_keys  # still the train split's problems
    # the held-out problems are the natural mix, problem for problem
    assert [e.key for e in even.examples("test", 300, seed=2)] == [e.key for e in natural.examples("test", 300, seed=2)]
    with pytest.raises(TinyLMError, match="even_lengths=2 must be 0"):
        get_task("builtin:calc?even_lengths=2")


def test_addition_reasoning_is_the_written_working(fmt: ChatFormat) -> None:
    task = get_task("builtin:addition")
    for example in task.examples("train", 100, seed=1):
        user, reply = example.messages
        a, b = map(int, re.fullmatch(r"What is (\d{4}) \+ (\d{4})\?", user["content"]).groups())
        lines = reply["reasoning_content"].splitlines()
        assert len(lines) == 4
        # read the answer back from the working, independently of how it was written
        digits, carry = "", 0
        for column, line in enumerate(lines):
            left, total, carry_out = re.fullmatch(r"([\d+]+)=(\d+) c(\d)", line).groups()
            parts = list(map(int, left.split("+")))
            assert parts[:2] == [a // 10**column % 10, b // 10**column % 10] and sum(parts) == int(total)
            assert parts[2:] == ([carry] if column else []) and int(carry_out) == int(total) // 10
            digits, carry = total[-1] + digits, int(carry_out)
        assert int((str(carry) if carry else "") + digits) == a + b == int(reply["content"])
        assert task.verify(reply["content"], example)
        rendered = fmt.render(list(example.messages))
        assert fmt.agent_ids["<|think|>"] in [t for t, m in zip(rendered.ids, rendered.mask) if m]
    plain = get_task("builtin:addition?reasoning=0").examples("train", 10, seed=1)
    assert [e.key for e in plain] == [e.key for e in task.examples("train", 10, seed=1)]
    assert all("reasoning_content" not in e.messages[-1] for e in plain)


@pytest.mark.parametrize("spec", ["builtin:addition", "builtin:addition?digits=9", "builtin:addition?reasoning=0"])
def test_addition_declares_a_reply_budget_its_whole_reference_fits(fmt: ChatFormat, spec: str) -> None:
    # evaluation asks for at least task.reply_tokens new tokens; a reference cut short would score 0
    task = get_task(spec)
    needed = 0
    for example in task.examples("train", 50, seed=2):
        needed = max(needed, len(fmt.render(list(example.messages)).ids) - len(fmt.prompt_ids(example.prompt)))
    assert needed <= task.reply_tokens <= needed + 12
    assert get_task("builtin:calc").reply_tokens == 1  # the tool loop budgets each round itself
