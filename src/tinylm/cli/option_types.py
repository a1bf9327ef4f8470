"""argparse types that check a range, so a flag and a `--config` value are refused alike and early.

argparse calls `type` on every value, from the command line or (through `tinylm.options_file`) from
a config file, and turns the ValueError into its one-line "argument --seed: ..." message. Checking
the range there stops `--max-new-tokens 1000000000000` before anything is allocated and keeps
seeds inside what numpy and torch accept.
"""

from __future__ import annotations

import argparse
import math
from collections.abc import Callable, Sequence

from tinylm.options import SEED


def plain_int(text: str) -> int:
    """An integer, range unchecked (a config's own validation checks it)."""
    try:
        return int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected an integer, got {text!r}") from None


plain_int.__name__ = "int"


def plain_float(text: str) -> float:
    """A number, range unchecked (a config's own validation checks it, nan and inf included)."""
    try:
        return float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected a number, got {text!r}") from None


plain_float.__name__ = "float"


def bounded_int(low: int, high: int, what: str = "") -> Callable[[str], int]:
    """A type that parses an integer in [low, high] (`what` explains the upper bound in the message)."""

    def parse(text: str) -> int:
        try:
            value = int(text)
        except ValueError:
            raise argparse.ArgumentTypeError(f"expected an integer, got {text!r}") from None
        if not low <= value <= high:
            reason = f" ({what})" if what else ""
            raise argparse.ArgumentTypeError(f"must be an integer in [{low}, {high}]{reason}, got {value}")
        return value

    parse.__name__ = "int"  # what it parses, for readers of the parser (argparse, tests, help tools)
    return parse


def bounded_float(low: float, high: float = math.inf, low_open: bool = False) -> Callable[[str], float]:
    """A type that parses a finite float in [low, high] ((low, high] with low_open)."""

    def parse(text: str) -> float:
        try:
            value = float(text)
        except ValueError:
            raise argparse.ArgumentTypeError(f"expected a number, got {text!r}") from None
        above = value > low if low_open else value >= low
        if not (math.isfinite(value) and above and value <= high):
            interval = f"{'(' if low_open else '['}{low:g}, {high:g}]"
            raise argparse.ArgumentTypeError(f"must be a finite number in {interval}, got {text}")
        return value

    parse.__name__ = "float"
    return parse


def one_of(choices: Sequence[str]) -> Callable[[str], str]:
    """A type that takes one of `choices` (an item of a comma list; a single value gets argparse's `choices`)."""

    def parse(text: str) -> str:
        if text not in choices:
            raise argparse.ArgumentTypeError(f"invalid choice {text!r} (choose from {', '.join(choices)})")
        return text

    parse.__name__ = "str"
    return parse


def comma_list(item: Callable[[str], object]) -> Callable[[str], list]:
    """A type that parses a comma list (`1,2,3`; empty is []), each item by `item`, which names a bad one."""

    def parse(text: str) -> list:
        return [item(part.strip()) for part in text.split(",") if part.strip()]

    parse.__name__ = "list"
    return parse


seed = bounded_int(int(SEED.low or 0), int(SEED.high or 0), SEED.reason)  # the --seed option's own range
