"""Options declared once, on the field that holds the value: its flag, help, choices and range.

TRL declares a trainer option as a dataclass field with its help in `metadata`; litgpt makes the
function signature the command line. tinylm does the first: a config field is declared with an
`Option`, and everything that sets it reads that one declaration:

- `cli/options.py` generates the argparse flags of every training command from its config class
  (and a command without a config class adds a shared option, e.g. `SEED`, by reference);
- `--config FILE` goes through those generated flags (options_file.py), so a file value gets the flag's
  type and choices;
- the pipeline checks its TOML tables against the same fields, and a later form (the studio) can draw
  its inputs, defaults, choices and ranges from `option_specs(config_class)`;
- `check_options(config)` refuses an out-of-range value in one line whichever way it came (flag, file,
  TOML, Python), so a config built in Python is checked exactly as the command line is.

A subclass that only changes a default redeclares the field plainly (`lr: float = 1e-3`); the option is
found through the class's bases. A registry supplies its own choices (a callable, read when the parser is
built), so `tinylm dpo --help` lists every loss the code has.

The options several commands share are declared here, once: the seed, threads, device, dtype, batch size,
compile and the sampling controls, a server's address, the seeds and steps of the commands that race runs
(compare, speedrun), and --json. A tool's options class takes a training option as it is (`option_from`).
"""

from __future__ import annotations

import dataclasses
import math
import types
import typing
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

from tinylm.errors import TinyLMError
from tinylm.runtime.device import DTYPES

SEED_LIMIT = 2**32  # numpy's RandomState and torch accept any seed in [0, 2**32)
COUNT_LIMIT = 2**31 - 1  # a count beyond this is a typo, and overflows int32 indexing anyway
_MISSING: Any = dataclasses.MISSING
ALWAYS_EXISTED: Any = type("AlwaysExisted", (), {"__repr__": lambda self: "ALWAYS_EXISTED"})()  # no value before it


@dataclass(frozen=True)
class Option:
    """How one value is set from outside: its flag, help, choices and range (the field holds the default)."""

    help: str
    group: str = ""  # the --help section; "" = the command's own options
    flag: str | None = None  # default --field-name; a bool field whose flag starts with --no- turns it off
    metavar: str | None = None
    choices: Sequence[str] | Callable[[], Sequence[str]] | None = None
    strict_choices: bool = True  # False: choices are listed in the help, the field's own check names the mistake
    low: float | None = None
    high: float | None = None
    low_open: bool = False  # (low, ...] instead of [low, ...]
    high_open: bool = False
    const: str | None = None  # the value of the bare flag (`--compile` = on); the flag then takes one optional value
    required: bool = False
    items: bool = False  # a repeatable NAME=VALUE option collected into a dict (`--set n_kv_head=1`)
    parse_item: Callable[[str], tuple[str, Any]] | None = None  # "NAME=VALUE" -> (name, typed value)
    reason: str = ""  # why the upper bound is what it is, for the message
    # this invocation's alone (where to run, how to show progress): a resumed run never takes it from the run
    per_invocation: bool = False
    # the value a run folder saved before this option existed had (not today's default): what a resume takes
    before_it_existed: Any = ALWAYS_EXISTED

    def __call__(self, default: Any = _MISSING, *, default_factory: Any = _MISSING, group: str | None = None,
                 note: str = "") -> Any:
        """A dataclass field carrying this option (`seed: int = SEED(1337)`); `note` adds use-specific help."""
        metadata = {"option": self, "group": group, "note": note}
        if default_factory is not _MISSING:
            return dataclasses.field(default_factory=default_factory, metadata=metadata)
        return dataclasses.field(default=default, metadata=metadata)

    def choice_list(self) -> tuple[str, ...]:
        choices = self.choices() if callable(self.choices) else self.choices
        return tuple(choices or ())

    def flag_for(self, name: str) -> str:
        return self.flag or "--" + name.replace("_", "-")

    def problem(self, value: Any) -> str | None:
        """What is wrong with `value` ("must be >= 1"), or None; None values are unset options and pass."""
        if value is None or isinstance(value, bool):
            return None
        if self.choices is not None and self.strict_choices and isinstance(value, str):
            known = self.choice_list()
            return None if value in known else f"must be one of {', '.join(known)}"
        if not isinstance(value, int | float):
            return None
        if isinstance(value, float) and not math.isfinite(value):
            return "must be a finite number"
        if self.low is not None and (value <= self.low if self.low_open else value < self.low):
            return f"must be {'>' if self.low_open else '>='} {_number(self.low)}"
        if self.high is not None and (value >= self.high if self.high_open else value > self.high):
            reason = f" ({self.reason})" if self.reason else ""
            return f"must be {'<' if self.high_open else '<='} {_number(self.high)}{reason}"
        return None


def _number(value: float | None) -> str:
    return f"{value:g}" if isinstance(value, float) and not float(value).is_integer() else f"{int(value or 0)}"


@dataclass(frozen=True)
class OptionSpec:
    """One field of a config class as an option: what a parser, a file reader or a form needs."""

    name: str
    option: Option
    default: Any
    kind: str  # "int", "float", "str", "bool", "dict" or "list" (the field's type, None allowed when `optional`)
    optional: bool
    group: str
    note: str

    @property
    def flag(self) -> str:
        return self.option.flag_for(self.name)

    def refusal(self, value: Any) -> str | None:
        """The one line refusing `value` (`--batch-size must be >= 1 (got 0)`), or None when it is allowed."""
        for item in value if isinstance(value, list | tuple) else [value]:  # a comma list: each of its items
            problem = self.option.problem(item)
            if problem is not None:
                return f"{self.flag} {problem} (got {item!r})"
        return None


def _kind(annotation: Any) -> tuple[str, bool]:
    union = typing.get_origin(annotation) in (typing.Union, types.UnionType)  # `int | None`, not `list[int]`
    args = typing.get_args(annotation) if union else ()
    optional = type(None) in args
    base = next((a for a in args if a is not type(None)), annotation) if args else annotation
    base = typing.get_origin(base) or base
    for kind in (bool, int, float, str, dict, list):
        if base is kind:
            return kind.__name__, optional
    raise TypeError(f"an option must be an int, float, str, bool, dict or list field, got {annotation!r}")


def declared_option(cls: type, name: str) -> tuple[Option, str, str] | None:
    """The option declared for field `name` on `cls` or the nearest base that declares one."""
    for klass in cls.__mro__:
        found = getattr(klass, "__dataclass_fields__", {}).get(name)
        if found is not None and "option" in found.metadata:
            meta = found.metadata
            return meta["option"], meta["group"] if meta["group"] is not None else meta["option"].group, meta["note"]
    return None


def declaring_depth(cls: type, name: str) -> int:
    """How far up `cls`'s bases the option of field `name` is declared (0: by `cls` itself)."""
    for depth, klass in enumerate(cls.__mro__):
        found = getattr(klass, "__dataclass_fields__", {}).get(name)
        if found is not None and "option" in found.metadata and name in vars(klass).get("__annotations__", {}):
            return depth
    return len(cls.__mro__)


def option_specs(cls: type) -> list[OptionSpec]:
    """Every field of a config dataclass that is an option, in declaration order (bases first)."""
    hints = typing.get_type_hints(cls)
    specs = []
    for f in dataclasses.fields(cls):
        declared = declared_option(cls, f.name)
        if declared is None:
            continue
        option, group, note = declared
        default = f.default_factory() if f.default_factory is not _MISSING else f.default  # type: ignore[misc]
        kind, optional = _kind(hints[f.name])
        specs.append(OptionSpec(f.name, option, None if default is _MISSING else default, kind, optional, group,
                                note))
    return specs


def check_options(config: Any) -> None:
    """Refuse the first value outside its option's range or choices: `--batch-size must be >= 1 (got 0)`."""
    for spec in option_specs(type(config)):
        refusal = spec.refusal(getattr(config, spec.name))
        if refusal is not None:
            raise TinyLMError(refusal)


def option_from(cls: type, name: str, default: Any = _MISSING, *, note: str | None = None, group: str = "") -> Any:
    """Field `name` of config class `cls` as a field of another options class: the same option (flag, help, range,
    choices), `cls`'s default unless `default` is given, its note unless `note` is; `group` is its --help section.

    `tinylm compare --preset` is `tinylm train --preset`: `preset: str = option_from(PretrainConfig, "preset")`.
    """
    declared = declared_option(cls, name)
    if declared is None:
        raise TypeError(f"{cls.__name__}.{name} is not an option")
    option, _, own_note = declared
    note = own_note if note is None else note
    if default is not _MISSING:
        return option(default, group=group, note=note)
    found = {f.name: f for f in dataclasses.fields(cls)}[name]
    if found.default_factory is not _MISSING:
        return option(default_factory=found.default_factory, group=group, note=note)
    return option(found.default, group=group, note=note)


# ---- the options several commands share, declared once -----------------------------------------------------
SEED = Option("random seed in [0, 2**32): the same seed gives the same run", low=0, high=SEED_LIMIT - 1,
              reason="what numpy and torch accept as a seed", metavar="S")
THREADS = Option("CPU threads (default: torch's choice)", low=1, high=4096, metavar="N")
DEVICE = Option("auto (cuda > mps > cpu), cpu, cuda, cuda:N, mps")
DTYPE = Option("compute dtype: auto = bf16 on bf16 GPUs and on CPUs with native bf16 where a short calibration "
               "shows it faster (the reason is printed), fp32 elsewhere", choices=DTYPES)
BATCH_SIZE = Option("rows per batch, per process", low=1, high=COUNT_LIMIT)
TEMPERATURE = Option("sampling temperature: 0 = greedy, higher = more random", metavar="T")
TOP_K = Option("sample among the K most likely tokens", low=1, high=COUNT_LIMIT, metavar="K")
TOP_P = Option("nucleus sampling: the most likely tokens holding probability P, in (0, 1]", metavar="P")
MAX_NEW_TOKENS = Option("tokens to generate at most", low=0, high=1_000_000, metavar="N",
                        reason="a million tokens is hours of decoding; more is a typo, refused before allocating")
TEACHER = Option("a teacher: a checkpoint or run folder that splits text as the student does", metavar="RUN")
CHECKPOINT = Option("a run folder (newest checkpoint) or a checkpoint folder", metavar="RUN", required=True)
INT8 = Option("int8 weights for the linear layers: a quarter of the weight memory, logits within a tested tolerance")
SYSTEM = Option("a system prompt (chat models)", metavar="TEXT")
TOOLS = Option("built-in tools the model may call, comma-separated: calculator, python (chat models)",
               metavar="LIST")
PROGRESS = Option("no progress bar", flag="--no-progress")
JSON = Option("print one JSON object")
COMPILE = Option("torch.compile: auto = only where it measures worth it, on, off (bare --compile = on)",
                 choices=("auto", "on", "off"), const="on")
HOST = Option("address to listen on; 127.0.0.1 is this machine only")
PORT = Option("TCP port; 0 picks a free one", low=0, high=65535)
SEEDS = Option("comma list of seeds in [0, 2**32), one run of each per seed", low=0, high=SEED_LIMIT - 1,
               reason="what numpy and torch accept as a seed")
STEPS = Option("training steps", low=1, high=10**9, reason="a billion steps is years of training; more is a typo")
