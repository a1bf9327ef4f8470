"""The built-in tools: the calculator is exact and never evaluates Python; calls that go wrong are results."""

from __future__ import annotations

import json
import random
import time
from fractions import Fraction

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from tinylm.errors import TinyLMError
from tinylm.tools import BUILTIN_TOOLS, get_tools, run_call, tool_declarations
from tinylm.tools.calculator import CalculatorError, calculate, format_number
from tinylm.tools.registry import Tool


def test_products_too_hard_for_a_small_model_are_exact() -> None:
    rng = random.Random(0)
    for _ in range(200):
        a, b = rng.randrange(100, 1000), rng.randrange(100, 1000)
        assert calculate(f"{a} * {b}") == str(a * b) == calculate(f"{a}*{b}")


@settings(max_examples=200, deadline=None)
@given(st.lists(st.integers(-10**6, 10**6), min_size=2, max_size=5), st.lists(st.sampled_from("+-*"), min_size=4,
                                                                                max_size=4))
def test_integer_expressions_equal_pythons_integers(numbers: list[int], ops: list[str]) -> None:
    """Python's own integer arithmetic is the reference for what the calculator computes without eval."""
    expression = str(numbers[0]) + "".join(f" {op} ({n})" for op, n in zip(ops, numbers[1:]))
    expected = numbers[0]
    terms = [Fraction(numbers[0])]  # precedence by hand: * binds tighter than + and -
    signs: list[str] = []
    for op, n in zip(ops, numbers[1:]):
        if op == "*":
            terms[-1] *= n
        else:
            terms.append(Fraction(n))
            signs.append(op)
    expected = terms[0]
    for sign, term in zip(signs, terms[1:]):
        expected = expected + term if sign == "+" else expected - term
    assert calculate(expression) == str(int(expected))


@pytest.mark.parametrize(("expression", "value"), [
    ("(1 + 2) / 4", "0.75"), ("1 / 3", "1/3"), ("0.1 + 0.2", "0.3"), ("-7 // 2", "-4"), ("7 % 3", "1"),
    ("2 ** 10", "1024"), ("2 ** -2", "0.25"), ("-(3 - 5) * 1.5", "3"), ("10 / -4", "-2.5"), ("1.005 * 1000", "1005"),
])
def test_decimals_and_fractions_are_never_rounded(expression: str, value: str) -> None:
    assert calculate(expression) == value


def test_format_number_matches_fraction() -> None:
    for value in (Fraction(1, 8), Fraction(-3, 40), Fraction(123456, 1000), Fraction(2, 3), Fraction(-5)):
        text = format_number(value)
        assert Fraction(text) == value


@pytest.mark.parametrize(("expression", "error"), [
    ("__import__('os').system('true')", "not Call"), ("open('/etc/passwd')", "not Call"), ("x + 1", "not Name"),
    ("2 ** 0.5", "whole exponents"), ("10 ** 65", "at most 64"), ("1 / 0", "division by zero"),
    ("0 ** -1", "division by zero"), ("(10 ** 60) ** 60", "200 digits"), ("9" * 90 + " ** 3", "200 digits"),
    ("1 +", "cannot read"), ("", "give an expression"), ("1" * 300, "at most 200 characters"), ("'a' * 3", "not 'a'"),
    ("[1, 2]", "not List"), ("1e308 * 10", "200 digits"),
])
def test_what_it_will_not_compute_is_a_clear_error(expression: str, error: str) -> None:
    with pytest.raises(CalculatorError, match=error):
        calculate(expression)


def test_run_call_turns_every_failure_into_a_result() -> None:
    tools = get_tools("calculator")
    assert run_call("calculator", '{"expression": "347*582"}', tools).content == "201954"
    for name, arguments, error in [("wolfram", "{}", "no tool named 'wolfram' (available: calculator)"),
                                   ("calculator", "{expression: 1}", "not JSON"),
                                   ("calculator", "[1]", "must be a JSON object"),
                                   ("calculator", '{"expression": 5}', "needs a string argument 'expression'"),
                                   ("calculator", '{"expression": "1", "x": 2}', "takes only 'expression'"),
                                   ("calculator", '{"expression": "1/0"}', "division by zero")]:
        result = run_call(name, arguments, tools)
        assert not result.ok and result.content.startswith("error: ") and error in result.content


def test_output_and_time_limits_hold() -> None:
    slow = Tool("slow", "sleeps", "x", lambda x: time.sleep(1.0) or "done")
    loud = Tool("loud", "shouts", "x", lambda x: "a" * 10_000)
    started = time.monotonic()
    result = run_call("slow", '{"x": ""}', [slow], time_limit=0.1)
    assert not result.ok and "ran past 0.1 s" in result.content and time.monotonic() - started < 0.9
    result = run_call("loud", '{"x": ""}', [loud], output_limit=100)
    assert result.ok and result.content.startswith("a" * 100) and "cut at 100 characters" in result.content
    assert len(result.content) < 200


def test_python_runs_in_the_sandbox() -> None:
    tools = get_tools("python")
    assert run_call("python", json.dumps({"code": "print(sum(range(10)))"}), tools).content == "45\n"
    result = run_call("python", json.dumps({"code": "open('/etc/passwd').read()"}), tools)
    assert not result.ok and "sandbox" in result.content
    result = run_call("python", json.dumps({"code": "1/0"}), tools)
    assert not result.ok and "ZeroDivisionError" in result.content


def test_tools_are_named_and_declared_in_openais_shape() -> None:
    assert [t.name for t in get_tools("calculator, python,calculator")] == ["calculator", "python"]
    assert get_tools(None) == [] and get_tools("") == []
    with pytest.raises(TinyLMError, match="unknown tool 'search': the built-in tools are calculator, python"):
        get_tools("search")
    for declaration in tool_declarations(list(BUILTIN_TOOLS.values())):
        function = declaration["function"]
        assert declaration["type"] == "function" and set(function) == {"name", "description", "parameters"}
        assert function["parameters"]["required"] == list(function["parameters"]["properties"])
