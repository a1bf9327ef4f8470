"""Running one tool call a model wrote: never an exception, always a result the model can read.

A call to an unknown tool, arguments that are not a JSON object, a tool that fails or runs too long
all come back as an error result ("error: ..."), which is appended as the tool turn like any other:
the conversation goes on and the model (or a reward) sees what went wrong. Output past
`output_limit` characters is cut, so a tool cannot flood the context window.
"""

from __future__ import annotations

import concurrent.futures
import json
from dataclasses import dataclass

from tinylm.tools.registry import Tool

OUTPUT_LIMIT = 2000  # characters of a tool's result kept
TIME_LIMIT_S = 10.0
_POOL = concurrent.futures.ThreadPoolExecutor(max_workers=4, thread_name_prefix="tinylm-tool")


@dataclass(frozen=True)
class CallResult:
    content: str  # what the tool turn says
    ok: bool  # False for any error: unknown tool, bad arguments, the tool failing or timing out


def run_call(name: str, arguments: str, tools: list[Tool], *, time_limit: float = TIME_LIMIT_S,
             output_limit: int = OUTPUT_LIMIT) -> CallResult:
    """Run the call `name(arguments)` (arguments as JSON text) on one of `tools`."""
    by_name = {tool.name: tool for tool in tools}
    if name not in by_name:
        return CallResult(f"error: no tool named {name!r} (available: {', '.join(by_name) or 'none'})", False)
    try:
        parsed = json.loads(arguments)
    except json.JSONDecodeError as error:
        return CallResult(f"error: the arguments are not JSON ({error.msg})", False)
    if not isinstance(parsed, dict):
        return CallResult("error: the arguments must be a JSON object", False)
    future = _POOL.submit(by_name[name].run, parsed)
    try:
        output = future.result(timeout=time_limit)
    except concurrent.futures.TimeoutError:
        return CallResult(f"error: {name} ran past {time_limit:g} s", False)
    except Exception as error:  # a failing tool is a result, never a crash of the conversation
        return CallResult(f"error: {error}", False)
    if len(output) > output_limit:
        output = output[:output_limit] + f"... [cut at {output_limit} characters]"
    return CallResult(output, True)
