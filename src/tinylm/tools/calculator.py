"""The calculator tool: exact arithmetic on an expression, parsed by `ast` and never passed to `eval`.

    calculate("347 * 582")        -> "201954"
    calculate("(1 + 2) / 4")      -> "0.75"
    calculate("1 / 3")            -> "1/3"       (exact: a fraction when the decimal would not end)
    calculate("2 ** 0.5")         -> CalculatorError (powers take whole exponents)

Numbers are integers and decimals (`1.25` is exactly 5/4: the literal's text is read, not a float),
operators + - * / // % ** and unary minus, with parentheses. Everything is a `Fraction`, so no
answer is ever rounded. Limits keep a call cheap whatever a model writes: the expression's length,
an exponent's size and every intermediate result's digits.
"""

from __future__ import annotations

import ast
import operator
from collections.abc import Callable
from fractions import Fraction

MAX_EXPRESSION = 200  # characters
MAX_EXPONENT = 64
MAX_DIGITS = 200  # of any numerator or denominator along the way


class CalculatorError(ValueError):
    """An expression the calculator will not compute; its message is what the model reads back."""


def _power(base: Fraction, exponent: Fraction) -> Fraction:
    if exponent.denominator != 1:
        raise CalculatorError("powers take whole exponents")
    if abs(exponent) > MAX_EXPONENT:
        raise CalculatorError(f"exponents are at most {MAX_EXPONENT}")
    if base == 0 and exponent < 0:
        raise CalculatorError("division by zero")
    return base ** int(exponent)


def _floor_divide(a: Fraction, b: Fraction) -> Fraction:
    return Fraction(a // b)


BINARY: dict[type[ast.operator], Callable[[Fraction, Fraction], Fraction]] = {
    ast.Add: operator.add, ast.Sub: operator.sub, ast.Mult: operator.mul, ast.Div: operator.truediv,
    ast.FloorDiv: _floor_divide, ast.Mod: operator.mod, ast.Pow: _power,
}


def _checked(value: Fraction) -> Fraction:
    if len(str(abs(value.numerator))) > MAX_DIGITS or len(str(value.denominator)) > MAX_DIGITS:
        raise CalculatorError(f"a number grew past {MAX_DIGITS} digits")
    return value


def _evaluate(node: ast.AST, source: str) -> Fraction:
    if isinstance(node, ast.Expression):
        return _evaluate(node.body, source)
    if isinstance(node, ast.Constant) and type(node.value) in (int, float):
        if type(node.value) is int:
            return _checked(Fraction(node.value))
        try:  # the literal's own text, so 0.1 is exactly 1/10 and not the float nearest it
            value = Fraction(ast.get_source_segment(source, node) or repr(node.value))
        except ValueError:
            raise CalculatorError(f"cannot read the number {node.value!r}") from None
        return _checked(value)
    if isinstance(node, ast.UnaryOp) and isinstance(node.op, (ast.USub, ast.UAdd)):
        value = _evaluate(node.operand, source)
        return -value if isinstance(node.op, ast.USub) else value
    if isinstance(node, ast.BinOp) and type(node.op) in BINARY:
        left, right = _evaluate(node.left, source), _evaluate(node.right, source)
        if isinstance(node.op, (ast.Div, ast.FloorDiv, ast.Mod)) and right == 0:
            raise CalculatorError("division by zero")
        return _checked(BINARY[type(node.op)](left, right))
    what = type(node).__name__ if not isinstance(node, ast.Constant) else repr(node.value)
    raise CalculatorError(f"only numbers, + - * / // % ** and parentheses are allowed, not {what}")


def format_number(value: Fraction) -> str:
    """An integer as itself, a fraction with a finite decimal as that decimal, any other as "p/q"."""
    if value.denominator == 1:
        return str(value.numerator)
    denominator, twos, fives = value.denominator, 0, 0
    while denominator % 2 == 0:
        denominator, twos = denominator // 2, twos + 1
    while denominator % 5 == 0:
        denominator, fives = denominator // 5, fives + 1
    if denominator != 1:
        return f"{value.numerator}/{value.denominator}"
    places = max(twos, fives)
    scaled = abs(value.numerator) * 10**places // value.denominator
    digits = str(scaled).rjust(places + 1, "0")
    return ("-" if value < 0 else "") + digits[:-places] + "." + digits[-places:]


def calculate(expression: str) -> str:
    """The exact value of `expression` as text; CalculatorError says why it cannot be computed."""
    if not isinstance(expression, str) or not expression.strip():
        raise CalculatorError("give an expression, e.g. 347 * 582")
    if len(expression) > MAX_EXPRESSION:
        raise CalculatorError(f"expressions are at most {MAX_EXPRESSION} characters")
    source = expression.strip()
    try:
        tree = ast.parse(source, mode="eval")
    except SyntaxError:
        raise CalculatorError(f"cannot read {source!r} as arithmetic") from None
    return format_number(_evaluate(tree, source))
