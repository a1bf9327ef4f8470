"""The anatomy of tool use (evaluate/tool_use.py) on hand-made runs, and its benchmark script end to end."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from test_tools_cli import chat_run  # noqa: F401 - the fixture
from tinylm.evaluate.tool_use import tool_use_anatomy
from tinylm.inference.tool_loop import ToolRun
from tinylm.tasks.registry import get_task

ROOT = Path(__file__).resolve().parents[1]


def run_of(expression: str | None, result: str, answer: str) -> ToolRun:
    messages = []
    if expression is not None:
        call = {"type": "function", "function": {"name": "calculator",
                                                 "arguments": json.dumps({"expression": expression})}}
        messages += [{"role": "assistant", "content": "", "tool_calls": [call]}, {"role": "tool", "content": result}]
    return ToolRun(messages=[*messages, {"role": "assistant", "content": answer}])


def test_each_share_counts_what_it_says() -> None:
    task = get_task("builtin:calc")
    hard = [e for e in task.examples("test", 60, seed=0) if e.key.startswith("hard")][:4]
    easy = [e for e in task.examples("test", 60, seed=0) if e.key.startswith("easy")][:2]
    operands = [e.key.split(":")[1] for e in hard]  # "347*582"
    answers = [e.answer for e in hard]
    runs = [run_of(operands[0].replace("*", " * "), answers[0], answers[0]),  # right call (spaces aside), right
            run_of("1*2", "2", "2"),  # wrong call, answer copied: wrong
            run_of(operands[2], answers[2], answers[2] + "1"),  # right call, misread result
            run_of(None, "", answers[3]),  # answered from its weights, right
            run_of(None, "", easy[0].answer),  # easy: direct and right
            run_of("1+1", "2", "nope")]  # easy: called anyway, wrong
    anatomy = tool_use_anatomy(task, [*hard, *easy], runs)
    lengths: dict[int, list[int]] = {}
    for example, right in zip(hard, (1, 0, 0, 1), strict=True):
        tally = lengths.setdefault(len(example.answer), [0, 0])
        tally[0], tally[1] = tally[0] + right, tally[1] + 1
    assert anatomy == {"problems_with_a_call": 4, "called": 0.75, "right_call": 0.5, "answer_is_result": 0.5,
                       "exact_match": 0.5, "direct": 2, "direct_called": 0.5, "direct_exact_match": 0.5,
                       "exact_match_by_answer_length": lengths}


def test_exact_match_is_split_by_the_length_of_the_answer() -> None:
    task = get_task("builtin:calc?hard_share=1")
    examples = task.examples("test", 80, seed=0)
    five = [e for e in examples if len(e.answer) == 5][:2]
    six = [e for e in examples if len(e.answer) == 6][:3]
    # a model that always writes six digits: the 5-digit answers get a digit twice, the 6-digit ones are right
    runs = [run_of(e.key.split(":")[1], e.answer, e.answer[:2] + e.answer[1:]) for e in five]
    runs += [run_of(e.key.split(":")[1], e.answer, e.answer) for e in six]
    anatomy = tool_use_anatomy(task, [*five, *six], runs)
    assert anatomy["exact_match_by_answer_length"] == {5: [0, 2], 6: [3, 3]}
    assert anatomy["exact_match"] == anatomy["answer_is_result"] == 0.6


def test_the_benchmark_prints_the_anatomy_of_a_checkpoint(chat_run: Path) -> None:  # noqa: F811
    out = subprocess.run([sys.executable, str(ROOT / "benchmarks" / "bench_tool_use.py"), "--checkpoint",
                          str(chat_run), "--examples", "3", "--max-new-tokens", "4"],
                         capture_output=True, text=True, check=True, timeout=300).stdout
    result = json.loads(out)
    assert result["examples"] == result["problems_with_a_call"] == 3
    assert {"called", "right_call", "answer_is_result", "exact_match"} <= result.keys()
    assert all(0.0 <= result[key] <= 1.0 for key in ("called", "right_call", "answer_is_result", "exact_match"))


@pytest.mark.parametrize("spec", ["builtin:addition"])
def test_a_task_without_tools_is_all_direct(spec: str) -> None:
    task = get_task(spec)
    examples = task.examples("test", 3, seed=0)
    runs = [ToolRun(messages=[{"role": "assistant", "content": e.answer}]) for e in examples]
    assert tool_use_anatomy(task, examples, runs)["direct_exact_match"] == 1.0
