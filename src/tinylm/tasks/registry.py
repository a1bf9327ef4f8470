"""get_task("builtin:NAME?key=value&..."): the one place that maps a spec to a task.

Parameters are split on "&" and "=" by hand rather than by `urllib.parse`, which would read the
"+" of `ops=+-*` as a space.
"""

from __future__ import annotations

import inspect
from collections.abc import Callable

from tinylm.errors import TinyLMError
from tinylm.tasks.arith import ArithTask
from tinylm.tasks.stdlib_functions import StdlibFunctionTask
from tinylm.tasks.task import Task

PREFIX = "builtin:"
TASKS: dict[str, Callable[..., Task]] = {"arith": ArithTask, "docstring": StdlibFunctionTask}


def known_tasks() -> str:
    return ", ".join(PREFIX + name for name in TASKS)


def _parameters(spec: str, query: str, factory: Callable[..., Task]) -> dict[str, object]:
    signature = inspect.signature(factory)
    params: dict[str, object] = {}
    for item in filter(None, query.split("&")):
        name, sep, raw = item.partition("=")
        if not sep or name not in signature.parameters:
            known = ", ".join(signature.parameters) or "none"
            raise TinyLMError(f"task {spec!r}: unknown parameter {item!r} (known: {known})")
        kind = type(signature.parameters[name].default)
        try:
            params[name] = kind(raw)
        except ValueError:
            raise TinyLMError(f"task {spec!r}: {name} expects {kind.__name__}, got {raw!r}") from None
    return params


def get_task(spec: str) -> Task:
    """The task a spec names, e.g. `builtin:arith`, `builtin:arith?digits=4&ops=+-*`, `builtin:docstring`."""
    body = spec.removeprefix(PREFIX)
    name, _, query = body.partition("?")
    if not spec.startswith(PREFIX) or name not in TASKS:
        raise TinyLMError(f"unknown task {spec!r}: known tasks are {known_tasks()}")
    return TASKS[name](**_parameters(spec, query, TASKS[name]))
