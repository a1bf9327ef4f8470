"""MkDocs hook: quote one function or class by name, `--8<-- "path/to/file.py@Name.method"`.

pymdownx.snippets can include a file whole or a range of lines, but line numbers go stale as soon as
the file changes. This hook runs before snippets and turns a name into the line range it has *today*
(found with `ast`), so the page quotes the same function after every edit. A missing file or name
fails the build, naming the page. Paths are relative to the repository root, as for snippets.
"""

from __future__ import annotations

import ast
import re
from pathlib import Path
from typing import Any

REF = re.compile(r'--8<-- "(?P<path>[^"@]+\.py)@(?P<name>[\w.]+)"')
ROOT = Path(__file__).resolve().parents[2]


def line_range(path: Path, qualname: str) -> tuple[int, int]:
    """First and last line (1-based, decorators included) of the function/class `qualname` in `path`."""
    scope: list[ast.stmt] = ast.parse(path.read_text(encoding="utf-8")).body
    node: ast.AST | None = None
    for part in qualname.split("."):
        node = next((n for n in scope if isinstance(n, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef))
                     and n.name == part), None)
        if node is None:
            raise KeyError(qualname)
        scope = node.body  # type: ignore[attr-defined]
    start = min([node.lineno] + [d.lineno for d in node.decorator_list])  # type: ignore[union-attr]
    return start, node.end_lineno  # type: ignore[union-attr, return-value]


def resolve(markdown: str, page: str = "<page>", root: Path = ROOT) -> str:
    def replace(match: re.Match[str]) -> str:
        path = root / match["path"]
        if not path.is_file():
            raise FileNotFoundError(f"{page}: quoted file {match['path']} does not exist")
        try:
            first, last = line_range(path, match["name"])
        except KeyError:
            raise KeyError(f"{page}: {match['path']} has no function or class {match['name']}") from None
        return f'--8<-- "{match["path"]}:{first}:{last}"'

    return REF.sub(replace, markdown)


def on_page_markdown(markdown: str, page: Any, **kwargs: Any) -> str:
    return resolve(markdown, page.file.src_uri)
