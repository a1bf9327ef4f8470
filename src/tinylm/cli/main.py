"""The `tinylm` command line: one subcommand per stage of the stage table, and the tools around them.

A command module (cli/commands/NAME.py) defines `HELP` (one line), `add_arguments(parser)` and
`run(args) -> int`. A training stage needs no module: every row of the stage table (stages/__init__.py)
is a command whose flags are generated from its config's option fields (cli/run_stage.py); a module
for it adds only its --help examples and closing lines.
Every option can also come from a TOML or JSON file given with `--config FILE` (keys are option
names, with dashes or underscores), checked as the flags are (see options_file.py); options on the
command line win. User mistakes surface as one line on stderr and a non-zero exit, never a
traceback (see errors.py); a closed stdout ends the command quietly. Importing this module is quick:
the command's modules, torch among them, load inside `main`, where a Ctrl-C waits until they have
loaded and is then "tinylm: interrupted" and exit 130 like any later one (`_interrupt_after_imports`).
"""

from __future__ import annotations

import argparse
import contextlib
import importlib
import signal
import sys
import threading
from collections.abc import Iterator
from typing import TYPE_CHECKING, Any, NoReturn

import tinylm.runtime.start_env  # noqa: F401  (first: sets MKL_CBWR before torch loads)
from tinylm.errors import CLOSED_PIPE_EXIT, TinyLMError, error_prefix, silence_closed_stdout, user_message
from tinylm.options_file import apply_options, load_options_file

if TYPE_CHECKING:
    from tinylm.stages import StageSpec

TOOLS: tuple[str, ...] = ("generate", "chat", "eval", "serve", "export", "import", "report", "bench", "compare",
                          "inspect", "speedrun", "scaling", "plot", "pipeline", "studio")


def commands() -> tuple[str, ...]:
    """Every command: prepare, one per row of the stage table (read now: a row added is a command), the tools."""
    from tinylm.stages import STAGES, command_of  # in main's try: the stage table imports torch (see the top)

    return ("prepare", *(command_of(name) for name in STAGES), *TOOLS)


class StageCommand:
    """A stage of the table as a command, for a stage with no cli/commands module of its own."""

    def __init__(self, spec: StageSpec) -> None:
        self.spec, self.HELP, self.__doc__ = spec, spec.help, spec.help

    def add_arguments(self, parser: argparse.ArgumentParser) -> None:
        from tinylm.cli.run_stage import add_stage_arguments  # in main's try: it imports torch (see the top)

        add_stage_arguments(parser, self.spec)

    def run(self, args: argparse.Namespace) -> int:
        from tinylm.cli.run_stage import run_stage_command  # in main's try: it imports torch (see the top)

        return run_stage_command(args, self.spec)


def _command_module(name: str) -> Any:
    module = f"{name}_cmd" if name == "import" else name
    try:
        return importlib.import_module(f"tinylm.cli.commands.{module}")
    except ModuleNotFoundError as exc:
        from tinylm.stages import stage_of_command  # in main's try: the stage table imports torch (see the top)

        spec = stage_of_command(name)
        if spec is None or exc.name != f"tinylm.cli.commands.{module}":
            raise
        return StageCommand(spec)


class OneLineParser(argparse.ArgumentParser):
    """argparse with its mistakes as one line (`tinylm: error: generate: argument --seed: ...`), exit 2."""

    def error(self, message: str) -> NoReturn:
        command = self.prog.partition(" ")[2]
        raise UsageError(f"{command + ': ' if command else ''}{message} (see {self.prog} --help)")


class UsageError(TinyLMError):
    """A command line argparse refused: exit status 2, as argparse's own."""


def _built_module(name: str) -> Any:
    """A command's module, or None for a stage not built yet."""
    try:
        return _command_module(name)
    except ModuleNotFoundError as exc:
        if exc.name and exc.name.startswith("tinylm.cli.commands"):
            return None
        raise


def _available_modules() -> dict[str, Any]:
    return {name: module for name in commands() if (module := _built_module(name)) is not None}


def _fill(parser: argparse.ArgumentParser, module: Any) -> argparse.ArgumentParser:
    parser.add_argument("--config", metavar="FILE",
                        help=getattr(module, "CONFIG_HELP", "read options from a TOML or JSON file"))
    module.add_arguments(parser)
    parser.set_defaults(_run=module.run)
    return parser


def build_parser() -> tuple[argparse.ArgumentParser, dict[str, argparse.ArgumentParser]]:
    """The `tinylm` parser and one sub-parser per command."""
    parser = OneLineParser(prog="tinylm", description="Train language models from scratch.")
    parser.add_argument("--version", action="version", version="tinylm 0.1.0")
    sub = parser.add_subparsers(dest="command", metavar="COMMAND")
    subparsers = {name: _fill(sub.add_parser(name, help=module.HELP, description=module.__doc__,
                                             formatter_class=argparse.RawDescriptionHelpFormatter), module)
                  for name, module in _available_modules().items()}
    return parser, subparsers


def command_parser(name: str) -> argparse.ArgumentParser | None:
    """The parser of one command alone, as `build_parser` makes it, without building the others."""
    module = _built_module(name) if name in commands() else None
    if module is None:
        return None
    return _fill(OneLineParser(prog=f"tinylm {name}", description=module.__doc__,
                               formatter_class=argparse.RawDescriptionHelpFormatter), module)


def parse_command_line(argv: list[str]) -> argparse.Namespace:
    """The options of one command: `--config FILE` first (through the flags' own checks), then the flags."""
    parser = command_parser(argv[0]) if argv else None
    if parser is None:
        return build_parser()[0].parse_args(argv)  # --help, --version, an unknown command: argparse's answers
    command, rest = argv[0], argv[1:]
    namespace = argparse.Namespace(command=command)
    config = _config_path(parser, rest)
    if config:
        apply_options(parser, load_options_file(config), config, namespace)
    return parser.parse_args(rest, namespace=namespace)


def _config_path(parser: argparse.ArgumentParser, args: list[str]) -> str | None:
    """--config's value (or an abbreviation's), found before the options the file may supply are required."""
    required = [action for action in parser._actions if action.required]
    for action in required:
        action.required = False
    try:
        known, _ = parser.parse_known_args(args)
    finally:
        for action in required:
            action.required = True
    return known.config


@contextlib.contextmanager
def _interrupt_after_imports() -> Iterator[None]:
    """A Ctrl-C during the block is raised when it ends (a second or two of imports), not inside it.

    Raised inside torch's import, a KeyboardInterrupt can pass through code an extension ran, and then
    `python -m tinylm` exits by the signal itself after printing "interrupted" (status -2, not 130).
    Only where Python's own handler is in place, in the main thread (a SIGINT ignored stays ignored)."""
    if threading.current_thread() is not threading.main_thread() or \
            signal.getsignal(signal.SIGINT) is not signal.default_int_handler:
        yield
        return
    interrupted: list[int] = []
    signal.signal(signal.SIGINT, lambda number, frame: interrupted.append(number))
    try:
        yield
    finally:
        signal.signal(signal.SIGINT, signal.default_int_handler)
    if interrupted:
        raise KeyboardInterrupt


def main(argv: list[str] | None = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    try:
        with _interrupt_after_imports():
            args = parse_command_line(argv)  # imports the command's module
            import torch  # noqa: F401  (here: the commands that import it as they run import it at once)
        if not getattr(args, "_run", None):
            build_parser()[0].print_help()
            return 2
        code = int(args._run(args) or 0)
        sys.stdout.flush()  # a reader that went away shows up here at the latest
        return code
    except BrokenPipeError:
        silence_closed_stdout()
        return CLOSED_PIPE_EXIT
    except KeyboardInterrupt:
        print("tinylm: interrupted", file=sys.stderr)
        return 130
    except Exception as exc:
        message = user_message(exc)
        if message is None:
            raise
        print(f"{error_prefix()}{message}", file=sys.stderr)
        return 2 if isinstance(exc, UsageError) else 1


if __name__ == "__main__":
    raise SystemExit(main())
