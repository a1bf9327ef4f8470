"""The tools' options (eval, bench, compare, speedrun) are declared once, on their options class, and the flags
several commands share are one declaration: the same flag, help and range wherever they appear."""

from __future__ import annotations

import argparse
import dataclasses
from pathlib import Path

import pytest

from tinylm.bench.compare import CompareOptions
from tinylm.bench.speedrun import SpeedrunOptions
from tinylm.bench.suite import BenchOptions
from tinylm.cli.main import command_parser, main, parse_command_line
from tinylm.cli.options import config_from_args
from tinylm.errors import TinyLMError
from tinylm.evaluate.tasks import EvalOptions
from tinylm.options import COMPILE, HOST, JSON, PORT, SEEDS, STEPS, option_specs

TOOLS = {"eval": EvalOptions, "bench": BenchOptions, "compare": CompareOptions, "speedrun": SpeedrunOptions}
REQUIRED = {"eval": ["--checkpoint", "RUN", "--tasks", "bpb"]}
# flag -> (the shared option, the commands that have it)
SHARED = {"--host": (HOST, ("serve", "studio")), "--port": (PORT, ("serve", "studio")),
          "--seeds": (SEEDS, ("compare", "speedrun")), "--steps": (STEPS, ("compare", "speedrun")),
          "--json": (JSON, ("eval", "bench", "speedrun", "report", "pipeline")),
          "--compile": (COMPILE, ("train", "bench", "speedrun"))}


@pytest.fixture(autouse=True)
def _work_in_tmp(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A command that wrongly ran on would write its outputs here, not into the repository."""
    monkeypatch.chdir(tmp_path)


def action(command: str, flag: str) -> argparse.Action:
    parser = command_parser(command)
    assert parser is not None
    return next(a for a in parser._actions if flag in a.option_strings)


@pytest.mark.parametrize("command", TOOLS)
def test_every_flag_default_is_the_options_class_default(command: str) -> None:
    cls = TOOLS[command]
    args = parse_command_line([command, *REQUIRED.get(command, [])])
    built, default = config_from_args(cls, args), cls()
    for spec in option_specs(cls):
        assert getattr(built, spec.name) == getattr(default, spec.name), spec.flag
    assert built == default
    flags = {a.dest for a in command_parser(command)._actions}
    assert {spec.name for spec in option_specs(cls)} <= flags


@pytest.mark.parametrize("command", TOOLS)
def test_every_field_of_a_tools_options_is_a_flag_or_a_python_only_field(command: str) -> None:
    cls = TOOLS[command]
    python_only = {f.name for f in dataclasses.fields(cls)} - {s.name for s in option_specs(cls)}
    assert python_only <= {"train", "seed"}, python_only  # other training fields; bench's fixed seed


@pytest.mark.parametrize("flag", SHARED)
def test_a_shared_flag_is_one_option_in_every_command(flag: str) -> None:
    option, commands = SHARED[flag]
    actions = {command: action(command, flag) for command in commands}
    for command, found in actions.items():
        assert found.help.startswith(option.help.replace("%", "%%")), (command, found.help)
        assert found.metavar == option.metavar, command
        assert option.const is None or found.const == option.const, command  # a flag's const is argparse's True
        choices = found.choices if found.choices is None else tuple(found.choices)
        assert choices == (option.choice_list() or None), command


def test_bench_compile_speaks_auto_on_off_and_the_bare_flag_is_on() -> None:
    assert parse_command_line(["bench"]).compile == "off"  # what bench measured before, by default
    assert parse_command_line(["bench", "--compile"]).compile == "on"
    for value in ("auto", "on", "off"):
        assert parse_command_line(["bench", "--compile", value]).compile == value
    with pytest.raises(TinyLMError, match="argument --compile: invalid choice"):
        parse_command_line(["bench", "--compile", "sometimes"])
    assert BenchOptions(compile=True).compile == "on" and BenchOptions(compile=False).compile == "off"


def test_bench_compile_auto_asks_the_compile_policy_for_a_long_run(monkeypatch: pytest.MonkeyPatch) -> None:
    import tinylm.bench.suite as suite
    from tinylm.runtime.choice import Choice

    asked = []

    def plan(requested: str, planned_steps: int, est_step_s: float | None, **shape: object) -> Choice[bool]:
        asked.append((requested, planned_steps))
        return Choice("compile", False, "eager: probed")

    monkeypatch.setattr(suite, "plan_compile", plan)
    micro = {"vocab_size": 256, "n_embed": 32, "n_head": 2, "n_kv_head": 1, "n_blocks": 1, "context_length": 32}
    result = suite.run_bench(BenchOptions(overrides=micro, batch_size=2, seq_len=16, repeats=1, warmup=0,
                                          device="cpu", threads=1, reference=False, compile="auto",
                                          sections=["train"]))
    assert asked == [("auto", suite.LONG_RUN_STEPS)]
    assert result["compiled"] is False and "compile (both models): eager: probed" in suite.format_table(result)


@pytest.mark.parametrize(("argv", "flag"), [
    (["eval", "--checkpoint", "RUN", "--tasks", "bpb", "--pass-k", "1001"], "--pass-k"),
    (["bench", "--repeats", "0"], "--repeats"),
    (["compare", "--seeds", "1,-2"], "--seeds"),
    (["speedrun", "--target-bpb", "0"], "--target-bpb"),
    (["serve", "--checkpoint", "RUN", "--port", "70000"], "--port"),
])
def test_an_out_of_range_tool_option_is_one_line_naming_the_flag(argv: list[str], flag: str, capsys) -> None:
    assert main(argv) != 0
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and err[0].startswith("tinylm: error: ") and flag in err[0], err


def test_the_options_classes_refuse_what_their_flags_refuse() -> None:
    with pytest.raises(TinyLMError, match=r"^--examples must be >= 1 \(got 0\)$"):
        EvalOptions(examples=0)
    with pytest.raises(TinyLMError, match=r"^--max-new-tokens must be >= 1 \(got 0\)$"):
        EvalOptions(max_new_tokens=0)
    with pytest.raises(TinyLMError, match=r"^--warmup must be >= 0 \(got -1\)$"):
        BenchOptions(warmup=-1)
    with pytest.raises(TinyLMError, match=r"^--seeds must be <= 4294967295 .*\(got 4294967296\)$"):
        CompareOptions(seeds=[1, 2**32])
    with pytest.raises(TinyLMError, match=r"^--steps must be >= 1 \(got 0\)$"):
        SpeedrunOptions(steps=0)


def test_a_config_file_sets_a_tools_options_through_its_flags(tmp_path: Path) -> None:
    options = tmp_path / "speedrun.toml"
    options.write_text('recipe = "wsd,muon"\nseeds = "4,5"\nsteps = 30\ncompile = "off"\n')
    args = parse_command_line(["speedrun", "--config", str(options)])
    opts = config_from_args(SpeedrunOptions, args)
    assert (opts.recipes, opts.seeds, opts.steps, opts.compile) == (["wsd", "muon"], [4, 5], 30, "off")


def test_the_shared_flags_are_written_once_in_the_source() -> None:
    from test_options import definition_sites  # this folder's own helper: where each flag is spelled out

    sites = definition_sites()
    assert {flag: sites[flag] for flag in SHARED} == dict.fromkeys(SHARED, 1)
