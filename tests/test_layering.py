"""The house's layering, read from the source: who may import whom, no circles, no oversized files or classes.

The import graph is read with `ast`, function-level imports included (a lazy import is still a
dependency: it only moves the failure to run time). `from tinylm.pkg import module` counts as an
import of the module. A unit is a package under tinylm (`tinylm.models.modern.rope` is in
`tinylm.models`) or a top-level module (`tinylm.errors`), and units must form no circle.
"""

from __future__ import annotations

import ast
import io
import re
import tokenize
from collections import defaultdict
from dataclasses import dataclass
from fnmatch import fnmatch
from functools import cache
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
SRC = ROOT / "src"
PACKAGE = SRC / "tinylm"
MAX_FILE_LINES = 400
MAX_CLASS_LINES = 250
PRAGMA = re.compile(r"#\s*(noqa|type:|pragma)")  # a comment for a tool, not a reason

# (areas that import, areas they must never import); an area is the unit's name below tinylm, a glob
FORBIDDEN: list[tuple[tuple[str, ...], tuple[str, ...]]] = [
    (("models", "tokenizer", "data", "checkpoint", "checkpoint_*", "inference", "serve", "interop", "evaluate"),
     ("train", "stages", "cli")),
    (("train",), ("stages", "cli")),
    (("runtime",), ("inference", "train", "stages", "evaluate", "serve", "interop", "pipeline", "bench", "cli")),
    (("tasks",), ("evaluate", "inference", "train", "stages", "cli")),
    (("tools",), ("tasks", "evaluate", "inference", "train", "stages", "serve", "cli")),
    (("sandbox",), ("tasks", "tools", "data", "models", "tokenizer", "inference", "evaluate", "train", "stages",
                    "serve", "cli")),
]
# area -> the only areas that may import it (besides itself)
ONLY_IMPORTED_BY: dict[str, tuple[str, ...]] = {
    "cli": ("__main__",),
    "pipeline": ("cli",),
}


@dataclass(frozen=True)
class Import:
    file: Path
    line: int
    source: str  # the importing module
    target: str  # the imported tinylm module (or package)
    in_function: bool
    justified: bool  # a comment on the same line or a comment line right above
    type_only: bool = False  # under `if TYPE_CHECKING:`, never run

    def where(self) -> str:
        return f"{self.file.relative_to(ROOT)}:{self.line} -> {self.target}"


def module_name(path: Path) -> str:
    parts = list(path.relative_to(SRC).with_suffix("").parts)
    if parts[-1] == "__init__":
        parts.pop()
    return ".".join(parts)


@cache
def source_files() -> tuple[Path, ...]:
    return tuple(sorted(PACKAGE.rglob("*.py")))


@cache
def known_modules() -> frozenset[str]:
    return frozenset(module_name(path) for path in source_files())


def unit(module: str) -> str:
    """`tinylm.a.b.c` -> `tinylm.a`; the root package is its own unit."""
    return ".".join(module.split(".")[:2])


def area(module: str) -> str:
    return unit(module).removeprefix("tinylm").removeprefix(".") or "tinylm"


def _comment_lines(text: str) -> tuple[set[int], set[int]]:
    """(lines holding a comment, lines holding only a comment); tool pragmas do not count."""
    anywhere, alone = set(), set()
    for token in tokenize.generate_tokens(io.StringIO(text).readline):
        if token.type == tokenize.COMMENT and not PRAGMA.match(token.string):
            anywhere.add(token.start[0])
            if not token.line[:token.start[1]].strip():
                alone.add(token.start[0])
    return anywhere, alone


def _targets(node: ast.Import | ast.ImportFrom, module: str, is_package: bool) -> list[str]:
    if isinstance(node, ast.Import):
        return [alias.name for alias in node.names]
    base = node.module or ""
    if node.level:
        package = module if is_package else module.rpartition(".")[0]
        for _ in range(node.level - 1):
            package = package.rpartition(".")[0]
        base = f"{package}.{base}" if base else package
    modules = known_modules()
    return [f"{base}.{alias.name}" if f"{base}.{alias.name}" in modules else base for alias in node.names]


def imports_of(text: str, module: str, is_package: bool, path: Path) -> list[Import]:
    """Every import of a tinylm module in one file's source, at any depth."""
    commented, comment_only = _comment_lines(text)
    found: list[Import] = []

    def visit(node: ast.AST, in_function: bool, type_only: bool) -> None:
        for child in ast.iter_child_nodes(node):
            if isinstance(child, (ast.Import, ast.ImportFrom)):
                lines = set(range(child.lineno, (child.end_lineno or child.lineno) + 1))
                justified = bool(lines & commented) or child.lineno - 1 in comment_only
                for target in dict.fromkeys(_targets(child, module, is_package)):
                    if target == "tinylm" or target.startswith("tinylm."):
                        found.append(Import(path, child.lineno, module, target, in_function, justified, type_only))
            visit(child, in_function or isinstance(child, (ast.FunctionDef, ast.AsyncFunctionDef, ast.Lambda)),
                  type_only or _is_type_checking(child))

    visit(ast.parse(text, filename=str(path)), in_function=False, type_only=False)
    return found


def _is_type_checking(node: ast.AST) -> bool:
    test = node.test if isinstance(node, ast.If) else None
    return (isinstance(test, ast.Name) and test.id == "TYPE_CHECKING") or (
        isinstance(test, ast.Attribute) and test.attr == "TYPE_CHECKING")


@cache
def all_imports() -> tuple[Import, ...]:
    return tuple(edge for path in source_files()
                 for edge in imports_of(path.read_text(encoding="utf-8"), module_name(path),
                                        path.name == "__init__.py", path))


def _matches(name: str, patterns: tuple[str, ...]) -> bool:
    return any(fnmatch(name, pattern) for pattern in patterns)


def _report(what: str, offenders: list[str]) -> str:
    return f"{len(offenders)} {what}:\n  " + "\n  ".join(offenders)


def test_the_import_graph_is_read() -> None:
    """A guard for the tests below: they would pass vacuously if nothing were found."""
    edges = all_imports()
    assert len(source_files()) > 100 and len(edges) > 300
    assert any(e.source == "tinylm.cli.main" and e.in_function is False for e in edges)


def test_function_level_and_relative_imports_resolve_to_modules() -> None:
    text = ("import tinylm.errors\n"
            "from . import hf  # noqa: F401\n"
            "\n"
            "def f():\n"
            "    # a circle: tinylm.data imports this module\n"
            "    from tinylm import paths, TinyLMError\n"
            "    import torch\n"
            "if TYPE_CHECKING:\n"
            "    from tinylm.train import loop\n")
    found = imports_of(text, "tinylm.interop.fake", False, PACKAGE / "interop" / "fake.py")
    assert [(e.target, e.line, e.in_function, e.justified, e.type_only) for e in found] == [
        ("tinylm.errors", 1, False, False, False), ("tinylm.interop.hf", 2, False, False, False),
        ("tinylm.paths", 6, True, True, False), ("tinylm", 6, True, True, False),
        ("tinylm.train.loop", 9, False, False, True)]


@pytest.mark.parametrize(("importers", "forbidden"), FORBIDDEN, ids=lambda names: "+".join(names)[:40])
def test_lower_floors_never_import_upper_ones(importers: tuple[str, ...], forbidden: tuple[str, ...]) -> None:
    offenders = [e.where() for e in all_imports()
                 if _matches(area(e.source), importers) and _matches(area(e.target), forbidden)]
    assert not offenders, _report(f"imports of {'/'.join(forbidden)} from {'/'.join(importers)}", offenders)


@pytest.mark.parametrize("guarded", sorted(ONLY_IMPORTED_BY))
def test_only_its_callers_import_a_top_floor(guarded: str) -> None:
    allowed = (guarded, *ONLY_IMPORTED_BY[guarded])
    offenders = [e.where() for e in all_imports()
                 if area(e.target) == guarded and not _matches(area(e.source), allowed)]
    assert not offenders, _report(f"imports of tinylm.{guarded} from outside {'/'.join(allowed)}", offenders)


def find_cycle(graph: dict[str, set[str]]) -> list[str] | None:
    """One cycle of `graph` as [a, b, ..., a], or None: a depth-first search that meets a node on its path."""
    state: dict[str, int] = {}  # 1: on the current path, 2: finished
    path: list[str] = []

    def visit(node: str) -> list[str] | None:
        state[node] = 1
        path.append(node)
        for nxt in sorted(graph.get(node, ())):
            if state.get(nxt) == 1:
                return path[path.index(nxt):] + [nxt]
            if nxt not in state and (cycle := visit(nxt)):
                return cycle
        path.pop()
        state[node] = 2
        return None

    for start in sorted(graph):
        if start not in state and (cycle := visit(start)):
            return cycle
    return None


def test_find_cycle_finds_one_and_only_one() -> None:
    assert find_cycle({"a": {"b"}, "b": {"c"}, "c": set()}) is None
    assert find_cycle({"a": {"b"}, "b": {"c"}, "c": {"b"}}) == ["b", "c", "b"]


def test_no_circle_between_packages() -> None:
    graph: dict[str, set[str]] = defaultdict(set)
    example: dict[tuple[str, str], Import] = {}
    for edge in all_imports():
        a, b = unit(edge.source), unit(edge.target)
        if a != b:
            graph[a].add(b)
            example.setdefault((a, b), edge)
    cycle = find_cycle(graph)
    assert cycle is None, _report("package imports closing a circle " + " -> ".join(cycle),
                                  [example[a, b].where() for a, b in zip(cycle, cycle[1:])])


def test_no_circle_between_modules_at_import_time() -> None:
    """Top-of-file imports between modules of one package close no circle either: one that does fails with
    `partially initialized module` depending on which module happens to be imported first."""
    graph: dict[str, set[str]] = defaultdict(set)
    example: dict[tuple[str, str], Import] = {}
    for edge in all_imports():
        if not edge.in_function and not edge.type_only and edge.source != edge.target:
            graph[edge.source].add(edge.target)
            example.setdefault((edge.source, edge.target), edge)
    cycle = find_cycle(graph)
    assert cycle is None, _report("top-of-file imports closing a circle " + " -> ".join(cycle),
                                  [example[a, b].where() for a, b in zip(cycle, cycle[1:])])


def test_no_file_is_too_long() -> None:
    offenders = [f"{p.relative_to(ROOT)}: {n} lines" for p in source_files()
                 if (n := len(p.read_text(encoding="utf-8").splitlines())) > MAX_FILE_LINES]
    assert not offenders, _report(f"files over {MAX_FILE_LINES} lines", offenders)


def test_no_class_is_too_long() -> None:
    offenders = []
    for path in source_files():
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if isinstance(node, ast.ClassDef) and (n := (node.end_lineno or 0) - node.lineno + 1) > MAX_CLASS_LINES:
                offenders.append(f"{path.relative_to(ROOT)}:{node.lineno} class {node.name}: {n} lines")
    assert not offenders, _report(f"classes over {MAX_CLASS_LINES} lines", offenders)


def unexplained_lazy_imports() -> list[Import]:
    """Function-level imports of tinylm modules with no comment saying why they cannot sit at the top."""
    return [e for e in all_imports() if e.in_function and not e.justified]


def test_lazy_imports_of_tinylm_say_why() -> None:
    """A tinylm module is imported at the top unless that would close a circle or slow the CLI's start,
    and the comment on the line (or the line above) says which."""
    offenders = [e.where() for e in unexplained_lazy_imports()]
    assert not offenders, _report("function-level tinylm imports without a comment saying why", offenders)
