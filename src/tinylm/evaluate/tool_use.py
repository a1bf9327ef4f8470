"""Where a tool-using model goes right or wrong: whether it calls, whether its call is the right one,
whether its answer is what the tool said.

Exact-match alone cannot tell a model that never asks the calculator from one that asks it the wrong
question or misreads its answer; each needs a different fix (more tool traces, a bigger model, RL on
the copying). For each problem with a reference call, the run after the tool loop is compared with
the reference trace:

    called             the model made at least one call
    right_call         its first call has the reference's first call's name and arguments
                       (JSON objects compared as values; strings with whitespace removed)
    answer_is_result   its final answer is the text of the last tool result it was given
    exact_match        the task's verifier accepts the final answer

each as a share of the problems with a reference call. Problems the reference answers directly are
counted apart (`direct`, and how many of them the model answered with a call anyway).
`exact_match_by_answer_length` splits the exact-match of the problems with a call by the length of
the reference answer ({length: [right, problems]}): a model that copies a result into a fixed number
of places, right for 6-digit products and never for 5-digit ones, shows there and nowhere else.
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from typing import Any

from tinylm.inference.tool_loop import ToolRun
from tinylm.tasks.task import Example, Task


def _calls(messages: Sequence[Mapping[str, Any]]) -> list[tuple[str, Any]]:
    """(name, arguments as a value) of every call the assistant turns make, in order."""
    out = []
    for message in messages:
        for call in message.get("tool_calls") or () if message.get("role") == "assistant" else ():
            function = call.get("function", call)
            arguments = function.get("arguments", {})
            try:
                value = json.loads(arguments) if isinstance(arguments, str) else arguments
            except json.JSONDecodeError:
                value = arguments
            out.append((function.get("name"), _canonical(value)))
    return out


def _canonical(value: Any) -> Any:
    if isinstance(value, dict):
        return {key: _canonical(item) for key, item in value.items()}
    if isinstance(value, list):
        return [_canonical(item) for item in value]
    return "".join(value.split()) if isinstance(value, str) else value


def tool_use_anatomy(task: Task, examples: Sequence[Example], runs: Sequence[ToolRun]) -> dict[str, Any]:
    """The shares above for `runs` (the tool loop's, one per example, in order)."""
    counts = dict(called=0, right_call=0, answer_is_result=0, exact_match=0)
    direct = direct_called = direct_right = 0
    by_length: dict[int, list[int]] = {}
    for example, run in zip(examples, runs, strict=True):
        reference = _calls(example.messages)
        made = _calls(run.messages)
        right = task.verify(run.final, example)
        if not reference:
            direct, direct_called, direct_right = direct + 1, direct_called + bool(made), direct_right + right
            continue
        results = [m["content"] for m in run.messages if m.get("role") == "tool"]
        counts["called"] += bool(made)
        counts["right_call"] += bool(made) and made[0] == reference[0]
        counts["answer_is_result"] += bool(results) and run.final.strip() == results[-1].strip()
        counts["exact_match"] += right
        tally = by_length.setdefault(len(example.answer), [0, 0])
        tally[0], tally[1] = tally[0] + right, tally[1] + 1
    with_call = len(examples) - direct
    return {"problems_with_a_call": with_call,
            **{key: count / with_call if with_call else 0.0 for key, count in counts.items()},
            "direct": direct, "direct_called": direct_called / direct if direct else 0.0,
            "direct_exact_match": direct_right / direct if direct else 0.0,
            "exact_match_by_answer_length": {length: by_length[length] for length in sorted(by_length)}}
