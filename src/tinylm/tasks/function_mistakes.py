"""Plausible wrong versions of a Python function, for the rejected side of preference pairs.

Each mutation changes the first place it applies and keeps the code parsing, so the verifier, not
a syntax error, is what tells the two answers apart: a comparison flipped, an integer constant
changed, a return value replaced by None, the last statement dropped. Both sides of a pair are
written by `ast.unparse` (`unparsed`), so formatting is no tell either.
"""

from __future__ import annotations

import ast
from collections.abc import Callable

_FLIPS = {ast.Lt: ast.GtE, ast.LtE: ast.Gt, ast.Gt: ast.LtE, ast.GtE: ast.Lt, ast.Eq: ast.NotEq, ast.NotEq: ast.Eq,
          ast.Is: ast.IsNot, ast.IsNot: ast.Is, ast.In: ast.NotIn, ast.NotIn: ast.In}


def _flip_comparison(function: ast.AST) -> bool:
    for node in ast.walk(function):
        if isinstance(node, ast.Compare) and type(node.ops[0]) in _FLIPS:
            node.ops[0] = _FLIPS[type(node.ops[0])]()
            return True
    return False


def _change_constant(function: ast.AST) -> bool:
    for node in ast.walk(function):
        if isinstance(node, ast.Constant) and type(node.value) is int:
            node.value += 1
            return True
    return False


def _return_none(function: ast.AST) -> bool:
    for node in ast.walk(function):
        if isinstance(node, ast.Return) and node.value is not None and not (
                isinstance(node.value, ast.Constant) and node.value.value is None):
            node.value = ast.Constant(None)
            return True
    return False


def _drop_last(function: ast.AST) -> bool:
    body = function.body  # type: ignore[attr-defined]
    if len(body) > 2:  # keep the first statement (a docstring) and at least one more
        body.pop()
        return True
    return False


MUTATIONS: tuple[tuple[str, Callable[[ast.AST], bool]], ...] = (
    ("flipped_comparison", _flip_comparison), ("changed_constant", _change_constant),
    ("returns_none", _return_none), ("dropped_statement", _drop_last))


def function_mistakes(source: str) -> dict[str, str]:
    """kind -> `source` (a function first) with that mutation; a kind that applies nowhere is left out."""
    out: dict[str, str] = {}
    for name, mutate in MUTATIONS:
        tree = ast.parse(source)
        if mutate(tree.body[0]):
            out[name] = ast.unparse(tree) + "\n"
    return out


def unparsed(source: str) -> str:
    """`source` as `ast.unparse` writes it, the layout of its mutations."""
    return ast.unparse(ast.parse(source)) + "\n"
