"""builtin:docstring: write a function of the Python standard library from its signature and docstring.

    user:      Write the Python function with this signature and docstring.

               def commonprefix(m):
                   \"\"\"Given a list of pathnames, returns the longest common leading component\"\"\"
    assistant: def commonprefix(m):
                   \"\"\"Given a list of pathnames, returns the longest common leading component\"\"\"
                   if not m: return ''
                   ...

The functions come from the running interpreter's own standard library (top-level modules of at
most MAX_MODULE_BYTES, no tests), read with `ast`: undecorated functions and methods with a
docstring and some code after it, whose source is at most `max_lines` lines. Nothing is downloaded
or copied into the repo. The split hashes "module:qualname". `verify` is strict: the response (a
``` fence around it is allowed) must parse as Python and its first function's AST, without line
numbers, must equal the reference's, so names, constants and structure must match; comments and
formatting may differ. Its wrong answers are mutations of the reference (`function_mistakes.py`).
"""

from __future__ import annotations

import ast
import random
import re
import textwrap
from dataclasses import dataclass
from functools import lru_cache

from tinylm.data.pystdlib import stdlib_root
from tinylm.errors import TinyLMError
from tinylm.tasks.function_mistakes import function_mistakes, unparsed
from tinylm.tasks.task import Example, Task, check_split, conversation, split_of

MAX_MODULE_BYTES = 64_000  # small modules parse fast and hold small, self-contained functions
MAX_FUNCTION_LINES = 40  # the longest function the scan keeps (`max_lines` chooses below it)
INSTRUCTION = "Write the Python function with this signature and docstring."
_FENCE = re.compile(r"```(?:python)?\n(.*?)```", re.DOTALL)


@dataclass(frozen=True)
class StdlibFunction:
    key: str  # "module:qualname"
    header: str  # signature and docstring, as the user sees them
    source: str  # the function's source, dedented
    lines: int


def _first_function(source: str) -> ast.FunctionDef | None:
    """The first function defined in `source` (a ``` fence around it allowed), or None."""
    fenced = _FENCE.search(source)
    try:
        tree = ast.parse(textwrap.dedent(fenced.group(1) if fenced else source))
    except (SyntaxError, ValueError):
        return None
    return next((node for node in tree.body if isinstance(node, ast.FunctionDef)), None)


def _normalised(source: str) -> str | None:
    """ast.dump of the first function in `source` without positions, or None."""
    function = _first_function(source)
    return None if function is None else ast.dump(function, include_attributes=False)


def _functions_in(module: str, tree: ast.Module, text: str) -> list[StdlibFunction]:
    lines = text.splitlines(keepends=True)
    found = []

    def visit(body: list[ast.stmt], prefix: str) -> None:
        for node in body:
            if isinstance(node, ast.ClassDef):
                visit(node.body, f"{prefix}{node.name}.")
            elif (isinstance(node, ast.FunctionDef) and not node.decorator_list and node.end_lineno is not None
                  and node.end_lineno - node.lineno < MAX_FUNCTION_LINES and ast.get_docstring(node)
                  and len(node.body) > 1):  # a body of only the docstring would be the prompt copied
                source = textwrap.dedent("".join(lines[node.lineno - 1:node.end_lineno])).rstrip() + "\n"
                function = _first_function(source)  # dedenting also dedents the docstring's lines: re-read
                if function is None:
                    continue  # e.g. a docstring line left of the def: the dedented text is not the function
                function.body = function.body[:1]  # the docstring alone
                found.append(StdlibFunction(f"{module}:{prefix}{node.name}", ast.unparse(function), source,
                                            node.end_lineno - node.lineno + 1))

    visit(tree.body, "")
    return found


@lru_cache(maxsize=1)
def stdlib_functions() -> tuple[StdlibFunction, ...]:
    """Every candidate function, sorted by key, first definition of a key kept (scanned once per process)."""
    by_key: dict[str, StdlibFunction] = {}
    for path in sorted(stdlib_root().glob("*.py")):
        if path.stat().st_size > MAX_MODULE_BYTES:
            continue
        text = path.read_text(encoding="utf-8", errors="replace")
        try:
            tree = ast.parse(text)
        except SyntaxError:
            continue
        for function in _functions_in(path.stem, tree, text):
            by_key.setdefault(function.key, function)
    return tuple(sorted(by_key.values(), key=lambda f: f.key))


class StdlibFunctionTask(Task):
    name = "docstring"

    def __init__(self, max_lines: int = 12) -> None:
        if not 3 <= max_lines <= MAX_FUNCTION_LINES:
            raise TinyLMError(f"builtin:docstring: max_lines={max_lines} must be between 3 and {MAX_FUNCTION_LINES}")
        self.max_lines = max_lines

    def pool(self, split: str) -> list[StdlibFunction]:
        return [f for f in stdlib_functions() if f.lines <= self.max_lines and split_of(f.key) == split]

    def examples(self, split: str, n: int, seed: int = 0) -> list[Example]:
        pool = self.pool(check_split(split))
        if not pool:
            raise TinyLMError(f"builtin:docstring: no standard library functions found under {stdlib_root()}")
        random.Random(f"docstring:{split}:{seed}").shuffle(pool)
        return [conversation(f.key, f"{INSTRUCTION}\n\n{f.header}", f.source) for f in pool[:n]]

    def verify(self, response: str, example: Example) -> bool:
        got = _normalised(response)
        return got is not None and got == _normalised(example.answer)

    def wrong_answers(self, example: Example) -> dict[str, str]:
        return function_mistakes(example.answer)

    def preferred_answer(self, example: Example) -> str:
        return unparsed(example.answer)
