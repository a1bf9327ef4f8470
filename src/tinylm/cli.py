"""The `tinylm` command line: one subcommand per stage, each living in `tinylm/commands/NAME.py`.

A command module defines `HELP` (one line), `add_arguments(parser)` and `run(args) -> int`. Command
modules import heavy libraries (torch, tokenizers) inside `run`, so `tinylm --help` stays instant.
Every option can also come from a TOML or JSON file given with `--config FILE` (keys are option
names, with dashes or underscores); options on the command line win. User mistakes surface as
one line on stderr and a non-zero exit, never a traceback.
"""

from __future__ import annotations

import argparse
import importlib
import json
import sys
from pathlib import Path
from typing import Any

from tinylm.errors import TinyLMError

COMMANDS: tuple[str, ...] = (
    "prepare", "train", "generate", "chat", "report", "bench", "compare", "plot", "export", "import",
)


def _command_module(name: str):
    return importlib.import_module(f"tinylm.commands.{name}_cmd" if name == "import" else f"tinylm.commands.{name}")


def load_config_file(path: str) -> dict[str, Any]:
    """Read a TOML or JSON options file into {dest: value}."""
    file = Path(path)
    if not file.is_file():
        raise TinyLMError(f"config file not found: {path}")
    text = file.read_text(encoding="utf-8")
    try:
        if file.suffix.lower() == ".json":
            data = json.loads(text)
        else:
            import tomllib

            data = tomllib.loads(text)
    except Exception as exc:  # noqa: BLE001 - any parse error is the user's file
        raise TinyLMError(f"cannot parse config file {path}: {exc}") from None
    if not isinstance(data, dict):
        raise TinyLMError(f"config file {path} must hold a table/object of options")
    return {key.replace("-", "_"): value for key, value in data.items()}


def build_parser() -> tuple[argparse.ArgumentParser, dict[str, argparse.ArgumentParser]]:
    parser = argparse.ArgumentParser(prog="tinylm", description="Train language models from scratch.")
    parser.add_argument("--version", action="version", version="tinylm 0.1.0")
    sub = parser.add_subparsers(dest="command", metavar="COMMAND")
    subparsers: dict[str, argparse.ArgumentParser] = {}
    for name in COMMANDS:
        try:
            module = _command_module(name)
        except ModuleNotFoundError as exc:
            if exc.name and exc.name.startswith("tinylm.commands"):
                continue  # a stage not built yet
            raise
        p = sub.add_parser(name, help=module.HELP, description=module.__doc__,
                           formatter_class=argparse.RawDescriptionHelpFormatter)
        p.add_argument("--config", metavar="FILE", help="read options from a TOML or JSON file")
        module.add_arguments(p)
        p.set_defaults(_run=module.run)
        subparsers[name] = p
    return parser, subparsers


def main(argv: list[str] | None = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    parser, subparsers = build_parser()
    try:
        args = parser.parse_args(argv)
        if getattr(args, "config", None):
            options = load_config_file(args.config)
            sub = subparsers[args.command]
            valid = {action.dest for action in sub._actions}
            unknown = sorted(set(options) - valid)
            if unknown:
                raise TinyLMError(f"unknown option(s) in {args.config}: {', '.join(unknown)}")
            sub.set_defaults(**options)
            args = parser.parse_args(argv)
        if not getattr(args, "_run", None):
            parser.print_help()
            return 2
        return int(args._run(args) or 0)
    except TinyLMError as exc:
        print(f"tinylm: error: {exc}", file=sys.stderr)
        return 1
    except ValueError as exc:
        if str(exc).startswith(("invalid config", "invalid override", "unknown preset", "unknown arch")):
            print(f"tinylm: error: {exc}", file=sys.stderr)
            return 1
        raise
    except KeyboardInterrupt:
        print("tinylm: interrupted", file=sys.stderr)
        return 130


if __name__ == "__main__":
    raise SystemExit(main())
