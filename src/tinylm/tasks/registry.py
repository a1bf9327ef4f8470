"""get_task(spec): the one place that maps a spec to a task, for SFT data, DPO pairs, RL `--task` and eval.

    builtin:NAME?key=value&...   every task: NAME from TASKS, the keys its constructor's parameters
    code                         builtin:code, the name `tinylm eval --tasks` has always used
    gsm8k:SOURCE                 GSM8K rows of SOURCE, every one held out (eval's form; SOURCE is taken
                                 verbatim: a file, or `gsm8k:hf:NAME[:CONFIG][:SPLIT]`)
    prompts:FILE                 the user's own {"prompt", "answer"} JSONL rows, checked by exact match, a
                                 tenth held out (`tinylm rl --task FILE.jsonl` means this)

A parameter is typed by its default (`digits=4` is an int); one without a default is required text,
such as the `file` of `builtin:gsm8k?file=data/gsm8k.jsonl` (a value cannot hold "&"). Parameters
are split on "&" and "=" by hand rather than by `urllib.parse`, which would read the "+" of
`ops=+-*` as a space.

Adding a task is one file and one line: write tasks/NAME.py with a `Task` subclass (`examples`,
`verify`, and `wrong_answers` if it can make preference pairs), add `"NAME": NameTask` to TASKS
below, and give it a section in docs/posttrain/tasks.md. Every command that takes a task spec
then reaches it.
"""

from __future__ import annotations

import inspect
from collections.abc import Callable
from functools import partial

from tinylm.errors import TinyLMError
from tinylm.tasks.addition import AdditionTask
from tinylm.tasks.arith import ArithTask
from tinylm.tasks.calc import CalcTask
from tinylm.tasks.code import CodeTask
from tinylm.tasks.gsm8k import GSM8KTask
from tinylm.tasks.prompt_file import PromptFileTask
from tinylm.tasks.stdlib_functions import StdlibFunctionTask
from tinylm.tasks.task import Task

PREFIX = "builtin:"
TASKS: dict[str, Callable[..., Task]] = {
    "arith": ArithTask,
    "calc": CalcTask,
    "addition": AdditionTask,
    "docstring": StdlibFunctionTask,
    "code": CodeTask,
    "gsm8k": partial(GSM8KTask, holdout="share"),  # a builtin: task holds out a tenth, like every other
}
SHORT_FORMS = {"code": "builtin:code"}  # spec -> the builtin: spec it stands for
SOURCE_FORMS: dict[str, Callable[[str], Task]] = {"gsm8k:": GSM8KTask, "prompts:": PromptFileTask}  # prefix -> task


def _required(factory: Callable[..., Task]) -> list[str]:
    return [name for name, p in inspect.signature(factory).parameters.items() if p.default is p.empty]


def builtin_specs() -> list[str]:
    """`builtin:NAME` for every registered task, with its required parameters (`builtin:gsm8k?file=FILE`)."""
    return [PREFIX + name + "".join(f"?{p}={p.upper()}" for p in _required(f)) for name, f in TASKS.items()]


def known_tasks() -> str:
    return ", ".join([*builtin_specs(), *SHORT_FORMS, *(f"{prefix}FILE" for prefix in SOURCE_FORMS)])


def is_task_spec(spec: str) -> bool:
    """Whether `spec` is meant as a task (it may still be a wrong one: `get_task` says why)."""
    return spec.startswith(PREFIX) or spec in SHORT_FORMS or spec.startswith(tuple(SOURCE_FORMS))


def _parameters(spec: str, query: str, factory: Callable[..., Task]) -> dict[str, object]:
    signature = inspect.signature(factory)
    params: dict[str, object] = {}
    for item in filter(None, query.split("&")):
        name, sep, raw = item.partition("=")
        if not sep or name not in signature.parameters:
            known = ", ".join(signature.parameters) or "none"
            raise TinyLMError(f"task {spec!r}: unknown parameter {item!r} (known: {known})")
        default = signature.parameters[name].default
        kind = str if default is inspect.Parameter.empty else type(default)
        try:
            params[name] = kind(raw)
        except ValueError:
            raise TinyLMError(f"task {spec!r}: {name} expects {kind.__name__}, got {raw!r}") from None
    missing = [name for name in _required(factory) if name not in params]
    if missing:
        raise TinyLMError(f"task {spec!r} needs {' and '.join(f'{m}=...' for m in missing)}")
    return params


def get_task(spec: str) -> Task:
    """The task a spec names, e.g. `builtin:arith?digits=4&ops=+-*`, `builtin:code`, `gsm8k:data/test.jsonl`."""
    for prefix, factory in SOURCE_FORMS.items():
        if spec.startswith(prefix):
            return factory(spec.removeprefix(prefix))
    spec_ = SHORT_FORMS.get(spec, spec)
    name, _, query = spec_.removeprefix(PREFIX).partition("?")
    if not spec_.startswith(PREFIX) or name not in TASKS:
        raise TinyLMError(f"unknown task {spec!r}: known tasks are {known_tasks()}")
    return TASKS[name](**_parameters(spec, query, TASKS[name]))
