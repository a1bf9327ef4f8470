"""argparse flags generated from the options declared on config fields (tinylm/options.py), never typed twice.

Two ways in, one declaration:

- `add_config_options(parser, SFTConfig)` adds a flag for every option field of a training stage's
  config, grouped as declared, with the field's default; `config_from_args(SFTConfig, args)` builds the
  config back. argparse parses the type (an integer, a finite number, one of the choices); the ranges
  are checked by the config itself (`check_options`, exit 1), because a config also comes from Python,
  the pipeline's TOML and the studio, and must refuse the same values with the same words there.
- `add_option(parser, "seed", SEED, default=0)` adds one shared option to a command that has no
  config class (generate, serve...): there argparse is the only gate, so it checks the range too
  (`argument --seed: must be an integer in [0, 4294967295] ...`, exit 2).

A tool's options class (EvalOptions, BenchOptions, CompareOptions, SpeedrunOptions) is a config class too:
`add_config_options(parser, EvalOptions, checked_here=True)` generates its flags and argparse also checks
their ranges, as a tool's flags always were (exit 2); the class checks them again for Python callers. A
`list[int]` or `list[str]` field is a comma list (`--seeds 1,2,3`), each item checked as one value is.
"""

from __future__ import annotations

import argparse
import math
import types
import typing
from collections.abc import Callable
from typing import Any

from tinylm.cli.option_types import bounded_float, bounded_int, comma_list, one_of, plain_float, plain_int
from tinylm.options import Option, OptionSpec, declaring_depth, option_specs

Group = argparse.ArgumentParser | argparse._ArgumentGroup
_UNSET: Any = object()


def _as_items(value: Any) -> list[str]:
    """NAME=VALUE strings, from a list (CLI, `set = [...]`) or a `[set]` table of a config file."""
    if value is None:
        return []
    if isinstance(value, dict):
        return [f"{name}={item}" for name, item in value.items()]
    return [value] if isinstance(value, str) else [str(item) for item in value]


class ItemsAction(argparse.Action):
    """A repeatable NAME=VALUE option (`--set`) that appends to whatever a config file gave, list or table."""

    def __call__(self, parser: argparse.ArgumentParser, namespace: argparse.Namespace, values: Any,
                 option_string: str | None = None) -> None:
        setattr(namespace, self.dest, [*_as_items(getattr(namespace, self.dest, None)), values])


def _help(option: Option, kind: str, default: Any, note: str) -> str:
    text = option.help + (f"; {note}" if note else "")
    if option.choices is not None and not option.strict_choices:
        text += f" (one of: {', '.join(option.choice_list())})"
    if default not in (None, False, "", [], {}) and option.const is None and kind != "bool":
        shown = ",".join(str(item) for item in default) if isinstance(default, list | tuple) else default
        text += f" (default: {shown})"
    return text.replace("%", "%%")  # argparse %-formats help strings


def _number_type(option: Option, kind: str, checked_here: bool) -> Any:
    if kind == "int":
        if not checked_here:
            return plain_int
        low = int(option.low) + int(option.low_open) if option.low is not None else -(2**63)
        high = int(option.high) - int(option.high_open) if option.high is not None else 2**63 - 1
        return bounded_int(low, high, option.reason)
    if not checked_here or (option.low is None and option.high is None):
        return plain_float  # the config, or the command's own check (sampling), names the mistake
    return bounded_float(-math.inf if option.low is None else option.low,
                         math.inf if option.high is None else option.high, option.low_open)


def _item_type(option: Option, kind: str, checked_here: bool) -> Callable[[str], Any]:
    """What parses one item of a comma-list option."""
    if kind in ("int", "float"):
        return _number_type(option, kind, checked_here)
    if checked_here and option.choices is not None and option.strict_choices:
        return one_of(option.choice_list())
    return str


def add_argument(group: Group, name: str, option: Option, kind: str, default: Any, note: str = "",
                 checked_here: bool = True, item_kind: str = "str") -> argparse.Action:
    """One flag for one option; `checked_here`: argparse refuses out-of-range values (no config checks them).

    A "list" option is one comma list of `item_kind` values.
    """
    flag = option.flag_for(name)
    kwargs: dict[str, Any] = {"dest": name, "help": _help(option, kind, default, note)}
    if kind == "bool":
        kwargs["action"] = "store_false" if flag.startswith("--no-") else "store_true"
        kwargs["default"] = default
        return group.add_argument(flag, **kwargs)
    if option.items:
        return group.add_argument(flag, action=ItemsAction, default=[], metavar=option.metavar or "NAME=VALUE",
                                  **kwargs)
    kwargs.update(default=default, metavar=option.metavar, required=option.required)
    if option.const is not None:
        kwargs.update(nargs="?", const=option.const)
    if kind in ("int", "float"):
        kwargs["type"] = _number_type(option, kind, checked_here)
    elif kind == "list":
        kwargs["type"] = comma_list(_item_type(option, item_kind, checked_here))
    elif option.choices is not None and option.strict_choices:
        kwargs["choices"] = option.choice_list()
        kwargs.pop("metavar")
    return group.add_argument(flag, **kwargs)


def add_option(parser: Group, name: str, option: Option, default: Any = None, *, kind: str | None = None,
               note: str = "", item_kind: str = "str") -> argparse.Action:
    """A shared option on a command without a config class; its kind follows the default unless given (a "list"
    is a comma list of `item_kind` values)."""
    if kind is None:
        kind = "str" if default is None else type(default).__name__
        if default is None and (option.low is not None or option.high is not None):
            kind = "int" if all(v is None or float(v).is_integer() for v in (option.low, option.high)) else "float"
    return add_argument(parser, name, option, kind, default, note, item_kind=item_kind)


def add_config_option(parser: Group, cls: type, name: str, default: Any = _UNSET, note: str = "") -> argparse.Action:
    """One option of a config class on a command without that config (`tinylm bench --preset`), checked here."""
    spec = next(spec for spec in option_specs(cls) if spec.name == name)
    return add_argument(parser, name, spec.option, spec.kind, spec.default if default is _UNSET else default,
                        note or spec.note)


def _item_kind(cls: type, name: str) -> str:
    """The type of a list field's items ("int" for `list[int]`), as a kind."""
    hint = typing.get_type_hints(cls)[name]
    union = typing.get_origin(hint) in (typing.Union, types.UnionType)  # `list[int] | None`
    lists = [arg for arg in (typing.get_args(hint) if union else (hint,)) if typing.get_origin(arg) in (list, tuple)]
    items = typing.get_args(lists[0]) if lists else ()
    return items[0].__name__ if items and isinstance(items[0], type) else "str"


def add_config_options(parser: argparse.ArgumentParser, cls: type, *, checked_here: bool = False) -> None:
    """A flag for every option field of `cls`, in the groups the fields declare, the stage's own groups first.

    `checked_here`: argparse refuses out-of-range values too (a tool's options); otherwise only `cls` does.
    """
    specs = option_specs(cls)
    depth = {spec.name: declaring_depth(cls, spec.name) for spec in specs}
    order = {group: min(depth[s.name] for s in specs if s.group == group) for group in {s.group for s in specs}}
    groups: dict[str, Group] = {}
    for spec in sorted(specs, key=lambda s: order[s.group]):  # stable: fields keep their order within a group
        if spec.group not in groups:
            groups[spec.group] = parser.add_argument_group(spec.group) if spec.group else parser
        add_argument(groups[spec.group], spec.name, spec.option, spec.kind, spec.default, spec.note,
                     checked_here=checked_here,
                     item_kind=_item_kind(cls, spec.name) if spec.kind == "list" else "str")


def _value(spec: OptionSpec, value: Any) -> Any:
    if spec.option.items:
        parse = spec.option.parse_item
        return dict(parse(item) if parse else tuple(item.split("=", 1)) for item in _as_items(value))
    return value


def config_from_args(cls: type, args: argparse.Namespace) -> Any:
    """The config the parsed options describe (checked by its own validation)."""
    values = {spec.name: _value(spec, getattr(args, spec.name)) for spec in option_specs(cls)
              if hasattr(args, spec.name)}
    return cls(**values)
