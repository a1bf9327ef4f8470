"""`--config FILE`: options from a TOML or JSON file, checked exactly as the same flags are.

Each key names an option by its long flag (`max-new-tokens`, `no-progress`, `set`) or by its
destination (`max_new_tokens`, `progress`), with dashes or underscores. A value is turned into the
strings the flag would have received and handed to that option's own argparse action, so a config
value gets the flag's type, range, choices and nargs checks, and a required option may come from the
file. Flags on the command line are parsed afterwards and win. A bool flag takes true/false; a
repeatable option (`set`) takes a list, or a table of NAME = VALUE.
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path
from typing import Any

from tinylm.errors import TinyLMError

NOT_FROM_FILES = ("help", "config", "version")


def load_options_file(path: str) -> dict[str, Any]:
    """The {key: value} table of a TOML or JSON options file, or one line saying why it cannot be read."""
    file = Path(path)
    if not file.is_file():
        raise TinyLMError(f"config file not found: {path}")
    try:
        text = file.read_bytes().decode("utf-8")
    except UnicodeDecodeError as exc:
        raise TinyLMError(f"config file {path} is not UTF-8 text (byte {exc.start})") from None
    except OSError as exc:
        raise TinyLMError(f"cannot read config file {path}: {exc.strerror}") from None
    try:
        if file.suffix.lower() == ".json":
            data = json.loads(text)
        else:
            import tomllib

            data = tomllib.loads(text)
    except ValueError as exc:  # json.JSONDecodeError and tomllib.TOMLDecodeError are ValueErrors
        raise TinyLMError(f"cannot parse config file {path}: {str(exc).splitlines()[0]}") from None
    if not isinstance(data, dict):
        raise TinyLMError(f"config file {path} must hold a table/object of options")
    return data


def option_keys(parser: argparse.ArgumentParser) -> dict[str, tuple[argparse.Action, bool]]:
    """{key: (action, names_the_flag)} for every option a file may set, keys spelled with underscores."""
    keys: dict[str, tuple[argparse.Action, bool]] = {}
    for action in parser._actions:
        if action.dest in NOT_FROM_FILES or action.dest == argparse.SUPPRESS:
            continue
        keys[action.dest] = (action, False)
        for flag in action.option_strings:
            if flag.startswith("--"):
                keys[flag[2:].replace("-", "_")] = (action, True)
    return keys


def apply_options(parser: argparse.ArgumentParser, options: dict[str, Any], source: str,
                  namespace: argparse.Namespace) -> None:
    """Run each option's own action on `namespace`; an option given here is no longer required on the command line."""
    keys = option_keys(parser)
    unknown = [str(key) for key in options if str(key).replace("-", "_") not in keys]
    if unknown:
        raise TinyLMError(f"unknown option(s) in {source}: {', '.join(unknown)} (see {parser.prog} --help)")
    seen: dict[argparse.Action, str] = {}
    for raw_key, value in options.items():
        action, names_flag = keys[str(raw_key).replace("-", "_")]
        if action in seen:
            raise TinyLMError(f"{source} sets {action.dest} twice (as {seen[action]!r} and {raw_key!r})")
        seen[action] = str(raw_key)
        try:
            _apply(parser, action, value, names_flag, namespace)
        except argparse.ArgumentError as exc:
            raise TinyLMError(f"{source}: {raw_key}: {exc.message}") from None
        action.required = False
    _check_exclusive(parser, seen, source)


def _apply(parser: argparse.ArgumentParser, action: argparse.Action, value: Any, names_flag: bool,
           namespace: argparse.Namespace) -> None:
    if action.nargs == 0:  # a flag: store_true, store_false, store_const
        if not isinstance(value, bool):
            raise argparse.ArgumentError(action, f"expects true or false, got {value!r}")
        given = value if names_flag else value == action.const
        if given:
            action(parser, namespace, action.const)
        return
    if _repeatable(action):
        items = [f"{k}={v}" for k, v in value.items()] if isinstance(value, dict) else _as_list(value)
        for item in items:
            action(parser, namespace, parser._get_values(action, [_flag_text(action, item)]))
        return
    if action.nargs in (None, "?"):
        strings = [_flag_text(action, value)]
    else:  # "+", "*" or a number of values
        strings = [_flag_text(action, item) for item in _as_list(value)]
        if action.nargs == "+" and not strings:
            raise argparse.ArgumentError(action, "expects at least one value")
        if isinstance(action.nargs, int) and len(strings) != action.nargs:
            raise argparse.ArgumentError(action, f"expects {action.nargs} values, got {len(strings)}")
    action(parser, namespace, parser._get_values(action, strings))


def _repeatable(action: argparse.Action) -> bool:
    """`append` options and custom ones that collect into a list (train's `--set`)."""
    return isinstance(action, argparse._AppendAction) or (
        action.nargs is None and isinstance(action.default, list) and type(action).__module__ != "argparse")


def _as_list(value: Any) -> list[Any]:
    return list(value) if isinstance(value, list) else [value]


def _flag_text(action: argparse.Action, value: Any) -> str:
    """What the user would have typed after the flag; tables and lists do not fit one value."""
    if isinstance(value, dict):
        raise argparse.ArgumentError(action, "expects one value, got a table")
    if isinstance(value, list):
        raise argparse.ArgumentError(action, f"expects one value, got a list {value!r}")
    if isinstance(value, bool):
        return "true" if value else "false"
    return str(value)


def _check_exclusive(parser: argparse.ArgumentParser, seen: dict[argparse.Action, str], source: str) -> None:
    for group in parser._mutually_exclusive_groups:
        given = [seen[a] for a in group._group_actions if a in seen]
        if len(given) > 1:
            raise TinyLMError(f"{source} sets {' and '.join(given)}, which exclude each other")
