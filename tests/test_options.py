"""Options are declared once, on the config fields, and every reader (flags, files, pipeline) gets them from there."""

from __future__ import annotations

import ast
import dataclasses
from collections import Counter
from pathlib import Path

import pytest

from tinylm.cli.main import command_parser, commands, main
from tinylm.errors import TinyLMError
from tinylm.options import DTYPE, SEED, Option, check_options, option_specs
from tinylm.pipeline.config import ROAD, PipelineConfig, parse_pipeline_config, slot_stage
from tinylm.runtime.device import DTYPES
from tinylm.stages import STAGES, command_of
from tinylm.stages.preference.losses import LOSSES
from tinylm.stages.pretrain.config import PretrainConfig
from tinylm.stages.rl.algorithms import algorithms
from tinylm.stages.sft.config import SFTConfig

SRC = Path(__file__).resolve().parents[1] / "src" / "tinylm"
SHARED_FLAGS = ("--seed", "--threads", "--dtype", "--temperature", "--top-k", "--max-new-tokens", "--batch-size",
                "--base", "--lora-rank", "--lora-alpha", "--lora-dropout", "--lora-targets", "--rslora")


def _flag(name: str) -> str:
    return "--" + name.replace("_", "-")


def definition_sites() -> Counter[str]:
    """Where each flag's spelling, help and range are written, read from the source.

    A site is an `add_argument("--x", ...)`, a field declared with its own `Option(...)` (`lr: float =
    Option(...)(3e-3)`), or a shared option constant (`SEED = Option(...)`), counted once per flag it is
    used under (`seed: int = SEED(1337)`, `add_option(parser, "seed", SEED, 0)` are uses, not sites).
    """
    sites: Counter[str] = Counter()
    shared: dict[str, set[str]] = {}  # constant -> the flags it is used under
    uses: list[tuple[str, str]] = []
    for path in SRC.rglob("*.py"):
        tree = ast.parse(path.read_text())
        for node in ast.walk(tree):
            if isinstance(node, ast.Assign) and isinstance(node.value, ast.Call) \
                    and getattr(node.value.func, "id", None) == "Option":
                shared.update({target.id: set() for target in node.targets if isinstance(target, ast.Name)})
            elif isinstance(node, ast.AnnAssign) and isinstance(node.value, ast.Call) \
                    and isinstance(node.target, ast.Name):
                inner = node.value.func
                if isinstance(inner, ast.Call) and getattr(inner.func, "id", None) == "Option":
                    flag = next((k.value.value for k in inner.keywords if k.arg == "flag"), _flag(node.target.id))
                    sites[flag] += 1
                elif isinstance(inner, ast.Name):
                    uses.append((inner.id, _flag(node.target.id)))
            elif isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute) \
                    and node.func.attr == "add_argument":
                flags = [a.value for a in node.args if isinstance(a, ast.Constant) and str(a.value).startswith("--")]
                sites.update(flags[:1])
            elif isinstance(node, ast.Call) and getattr(node.func, "id", None) == "add_option" \
                    and len(node.args) >= 3 and isinstance(node.args[1], ast.Constant):
                uses.append((getattr(node.args[2], "id", ""), _flag(node.args[1].value)))
    for constant, flag in uses:
        if constant in shared:
            shared[constant].add(flag)
    for flags in shared.values():
        sites.update(flags)
    return sites


def test_the_shared_flags_have_one_definition_site() -> None:
    sites = definition_sites()
    assert {flag: sites[flag] for flag in SHARED_FLAGS} == dict.fromkeys(SHARED_FLAGS, 1)


def test_every_field_of_every_stage_config_is_an_option_and_none_is_hidden() -> None:
    for spec in STAGES.values():
        options = {s.name for s in option_specs(spec.config)}
        fields = {f.name for f in dataclasses.fields(spec.config)}
        assert fields == options and not hasattr(spec.config, "hidden_options"), spec.name


def test_every_registry_choice_appears_in_its_commands_help(capsys: pytest.CaptureFixture[str]) -> None:
    wanted = {"dpo": [*LOSSES, *DTYPES], "rl": [*algorithms(), *DTYPES], "train": ["adamw", "muon", "wsd"]}
    for command, names in wanted.items():
        with pytest.raises(SystemExit):
            main([command, "--help"])
        text = " ".join(capsys.readouterr().out.split())
        missing = [name for name in names if name not in text]
        assert not missing, (command, missing)
    assert "rpo" in LOSSES


def test_every_stage_of_the_table_is_a_command_with_its_configs_flags() -> None:
    for name, spec in STAGES.items():
        assert command_of(name) in commands()
        parser = command_parser(command_of(name))
        dests = {action.dest for action in parser._actions}
        assert {s.name for s in option_specs(spec.config)} <= dests, name


def test_a_config_built_in_python_is_checked_like_the_flags() -> None:
    with pytest.raises(TinyLMError, match=r"^--batch-size must be >= 1 \(got 0\)$"):
        PretrainConfig(batch_size=0)
    with pytest.raises(TinyLMError, match=r"--lr must be > 0"):
        PretrainConfig(lr=0.0)
    with pytest.raises(TinyLMError, match=r"--beta2 must be < 1"):
        PretrainConfig(beta2=1.0)
    with pytest.raises(TinyLMError, match=r"--seed must be <= 4294967295 \(what numpy and torch accept"):
        PretrainConfig(seed=2**32)
    with pytest.raises(TinyLMError, match=r"--dtype must be one of auto, fp32, bf16, fp16"):
        PretrainConfig(dtype="fp8")
    with pytest.raises(TinyLMError, match=r"--lora-dropout must be < 1"):
        SFTConfig(base="x", lora_dropout=1.0)
    with pytest.raises(TinyLMError, match=r"--decay-fraction must be a finite number"):
        PretrainConfig(decay_fraction=float("nan"))
    check_options(PretrainConfig())  # the defaults pass their own checks


def test_an_option_reports_the_side_it_crosses() -> None:
    assert SEED.problem(-1) == "must be >= 0"
    assert SEED.problem(0) is None and SEED.problem(2**32 - 1) is None
    assert DTYPE.problem("bf16") is None and DTYPE.problem("half").startswith("must be one of")
    opened = Option("x", low=0, high=1, low_open=True, high_open=True)
    assert [opened.problem(v) for v in (0, 0.5, 1)] == ["must be > 0", None, "must be < 1"]


def test_the_pipeline_reads_the_stage_table_and_the_same_fields() -> None:
    assert [slot_stage(slot).name for slot, _ in ROAD] == ["pretrain", "sft", "dpo", "rl", "distill"]
    assert PipelineConfig().stages == ["pretrain", "sft", "dpo", "grpo"]  # distill: only when named
    config = parse_pipeline_config({"grpo": {"algo": "rloo", "group_size": 4}})
    assert config.section("grpo")["algo"] == "rloo"
    with pytest.raises(TinyLMError, match=r"\[sft\] unknown key 'preset'"):
        parse_pipeline_config({"sft": {"preset": "small"}})  # pretraining's option, not SFT's


def test_a_config_file_value_is_checked_by_the_field_it_sets(tmp_path: Path, capsys) -> None:
    options = tmp_path / "bad.toml"
    options.write_text("max-steps = 0\n")
    assert main(["train", "--config", str(options), "--data", str(tmp_path / "nope")]) == 1
    assert "--max-steps must be >= 1 (got 0)" in capsys.readouterr().err


@pytest.mark.parametrize(("command", "flag", "value"), [
    ("dpo", "--beta", "inf"), ("dpo", "--gamma", "nan"), ("reward", "--margin", "nan"), ("rl", "--beta", "inf"),
    ("rl", "--gamma", "nan"), ("sft", "--lr", "inf"), ("train", "--decay-fraction", "nan"),
])
def test_non_finite_numbers_are_refused_before_anything_runs(tmp_path: Path, capsys, command: str, flag: str,
                                                             value: str) -> None:
    """Issue 23.14: `--beta inf` used to pass the parser and turn the loss into NaN."""
    base = [] if command == "train" else ["--base", str(tmp_path / "no-such-run")]
    assert main([command, *base, "--out", str(tmp_path / "out"), flag, value]) == 1
    err = capsys.readouterr().err.strip().splitlines()
    assert err == [f"tinylm: error: {flag} must be a finite number (got {float(value)!r})"]
    assert not (tmp_path / "out").exists()
