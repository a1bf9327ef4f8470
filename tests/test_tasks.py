"""Built-in tasks: deterministic from a seed, disjoint train/test splits, answers checked independently."""

from __future__ import annotations

import ast
import operator

import pytest

from tinylm.errors import TinyLMError
from tinylm.tasks.arith import ArithTask, parse_integer
from tinylm.tasks.registry import get_task
from tinylm.tasks.stdlib_functions import StdlibFunctionTask, stdlib_functions
from tinylm.tasks.task import TEST_SHARE, split_of

PYTHON_OPS = {"+": operator.add, "-": operator.sub, "*": operator.mul}


def test_arith_answers_are_what_python_computes() -> None:
    for example in get_task("builtin:arith?digits=4").examples("train", 200, seed=3):
        question = example.messages[0]["content"]
        a, op, b = question.removeprefix("What is ").removesuffix("?").split(" ")
        assert example.messages[1] == {"role": "assistant", "content": str(PYTHON_OPS[op](int(a), int(b)))}
        assert example.answer == example.messages[1]["content"]
        assert example.prompt == [example.messages[0]]
        assert len(a) <= 4 and len(b) <= 4


def test_arith_same_seed_same_list_other_seed_other_list() -> None:
    task = get_task("builtin:arith")
    assert task.examples("train", 50, seed=1) == task.examples("train", 50, seed=1)
    assert task.examples("train", 50, seed=1) != task.examples("train", 50, seed=2)


@pytest.mark.parametrize("spec", ["builtin:arith?digits=1", "builtin:arith?digits=2&ops=+-", "builtin:arith"])
def test_arith_train_and_test_never_share_a_problem(spec: str) -> None:
    task = get_task(spec)
    train = {e.key for seed in (0, 1) for e in task.examples("train", 3000, seed)}
    test = {e.key for seed in (0, 1) for e in task.examples("test", 3000, seed)}
    assert train and test and not train & test
    assert all(split_of(k) == "train" for k in train) and all(split_of(k) == "test" for k in test)


def test_one_digit_split_is_the_whole_space_divided_by_the_hash() -> None:
    task = ArithTask(digits=1, ops="+")
    train, test = task.examples("train", 10**6), task.examples("test", 10**6)
    assert len(train) + len(test) == 100 and len({e.key for e in train + test}) == 100
    assert 0 < len(test) < 30  # about TEST_SHARE of 100


def test_held_out_share_is_about_a_tenth() -> None:
    keys = [f"{a}+{b}" for a in range(100) for b in range(100)]
    share = sum(split_of(k) == "test" for k in keys) / len(keys)
    assert abs(share - TEST_SHARE) < 0.02


def test_digits_and_ops_are_respected() -> None:
    examples = get_task("builtin:arith?digits=2&ops=*").examples("train", 100)
    for example in examples:
        a, op, b = example.messages[0]["content"].removeprefix("What is ").removesuffix("?").split(" ")
        assert op == "*" and int(a) < 100 and int(b) < 100


def test_arith_verifier_reads_the_last_integer() -> None:
    example = get_task("builtin:arith?digits=4&ops=-").examples("train", 1)[0]
    answer = example.answer
    assert ArithTask().verify(answer, example)
    assert ArithTask().verify(f" = {answer}\n", example)
    assert not ArithTask().verify(str(int(answer) + 1), example)
    assert not ArithTask().verify("I do not know", example)
    assert parse_integer("the answer is 30,194.") == 30194
    assert parse_integer("-12") == -12


@pytest.mark.parametrize("spec, message", [
    ("builtin:nope", "known tasks are builtin:arith, builtin:calc, builtin:addition, builtin:docstring"),
    ("arith", "known tasks are"),
    ("builtin:arith?digits=0", "digits=0 must be between 1 and 18"),
    ("builtin:arith?digits=two", "digits expects int"),
    ("builtin:arith?ops=/", "ops='/'"),
    ("builtin:arith?base=2", "unknown parameter 'base=2' \\(known: digits, ops\\)"),
])
def test_bad_specs_are_one_clear_line(spec: str, message: str) -> None:
    with pytest.raises(TinyLMError, match=message):
        get_task(spec)


def test_unknown_split_is_refused() -> None:
    with pytest.raises(TinyLMError, match="unknown split 'dev'"):
        get_task("builtin:arith").examples("dev", 1)


def test_stdlib_functions_come_from_real_source_and_verify_against_themselves() -> None:
    task = get_task("builtin:docstring")
    assert isinstance(task, StdlibFunctionTask)
    examples = task.examples("train", 40, seed=0)
    assert examples == task.examples("train", 40, seed=0) and len(examples) == 40
    for example in examples:
        function = ast.parse(example.answer).body[0]
        assert isinstance(function, ast.FunctionDef) and ast.get_docstring(function)
        assert example.messages[0]["content"].startswith("Write the Python function")
        assert f"def {function.name}(" in example.messages[0]["content"]
        assert len(example.answer.splitlines()) <= 12
        assert task.verify(example.answer, example)
        assert task.verify(f"```python\n{example.answer}```", example)


def test_stdlib_verifier_is_strict() -> None:
    task = StdlibFunctionTask()
    example = task.examples("train", 1, seed=5)[0]
    reformatted = ast.unparse(ast.parse(example.answer))  # same AST, other formatting, no comments
    assert task.verify(reformatted, example)
    header_only = example.messages[0]["content"].split("\n\n", 1)[1]
    assert not task.verify(header_only, example)
    assert not task.verify(example.answer.replace("def ", "def x", 1), example)
    assert not task.verify("def broken(:\n", example)


def test_stdlib_split_is_by_module_and_qualname() -> None:
    task = StdlibFunctionTask(max_lines=20)
    train, test = task.pool("train"), task.pool("test")
    assert train and test and not {f.key for f in train} & {f.key for f in test}
    assert all(split_of(f.key) == "test" for f in test)
    assert len({f.key for f in stdlib_functions()}) == len(stdlib_functions())
    assert not any(f.key.startswith("test") for f in stdlib_functions())
