"""Every kind of failure a user met is one line and a non-zero exit, tested by class over every option.

The classes: a `--config` value that the same flag would refuse, an out-of-range integer or a
non-finite float, memory running out, a disk that refuses a write, and errors under torchrun.
"""

from __future__ import annotations

import argparse
import errno
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
import torch

import tinylm.cli.commands.generate as generate_command
from tinylm.cli.main import build_parser, main, parse_command_line
from tinylm.errors import TinyLMError, error_prefix, io_failure, is_oom, user_message
from tinylm.options_file import option_keys

HUGE, NEGATIVE = str(10**20), "-5"
CHECKED_INTEGERS = ("generate", "chat", "export", "import", "compare", "report")
FLOAT_MISTAKES = {"generate": {"--temperature": ["nan", "inf", "-1"], "--top-p": ["nan", "0", "2"],
                               "--min-p": ["nan", "-0.5"], "--repetition-penalty": ["nan", "0", "inf"]},
                  "compare": {"--lr": ["nan", "0", "-1"], "--time-budget": ["inf", "0"]}}


@pytest.fixture(autouse=True)
def _work_in_tmp(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A command that wrongly ran on would write its defaults (runs/, data) here, not into the repository."""
    monkeypatch.chdir(tmp_path)


def parse_error(argv: list[str]) -> str:
    """The one line parsing refuses `argv` with (the command never runs)."""
    with pytest.raises(TinyLMError) as refused:
        parse_command_line(argv)
    message = str(refused.value)
    assert "\n" not in message
    return message


def one_error_line(capsys: pytest.CaptureFixture[str]) -> str:
    out, err = capsys.readouterr()
    lines = err.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("tinylm: error: "), err
    assert "Traceback" not in err
    return lines[0]


def subcommands() -> dict[str, argparse.ArgumentParser]:
    return build_parser()[1]


def value_actions(parser: argparse.ArgumentParser) -> list[argparse.Action]:
    return [a for a in parser._actions if a.dest not in ("help", "config")]


def is_integer(action: argparse.Action) -> bool:
    return action.type is int or getattr(action.type, "__name__", "") == "int"


def required_args(parser: argparse.ArgumentParser, tmp_path: Path) -> list[str]:
    """Something for every required option (paths that do not exist), so parsing reaches the option tested."""
    args: list[str] = []
    for action in value_actions(parser):
        if action.required:
            value = str(tmp_path / f"missing-{action.dest}")
            args += [action.option_strings[0], value] if action.option_strings else [value]
    return args


def write_options(tmp_path: Path, options: dict) -> str:
    path = tmp_path / "options.json"
    path.write_text(json.dumps(options), encoding="utf-8")
    return str(path)


# ---- out-of-range numbers on the command line --------------------------------------------------
@pytest.mark.parametrize("command", CHECKED_INTEGERS)
def test_every_integer_option_refuses_huge_and_negative_values_in_one_line(command: str, tmp_path: Path,
                                                                            capsys) -> None:
    parser = subcommands()[command]
    integers = [a for a in value_actions(parser) if is_integer(a)]
    for action in integers:
        flag = action.option_strings[0]
        for value in (HUGE, NEGATIVE):
            code = main([command, *required_args(parser, tmp_path), flag, value])
            line = one_error_line(capsys)
            assert code != 0 and flag in line, (flag, value, line)


@pytest.mark.parametrize("command", FLOAT_MISTAKES)
def test_non_finite_and_out_of_range_floats_are_one_line(command: str, tmp_path: Path, capsys) -> None:
    parser = subcommands()[command]
    for flag, values in FLOAT_MISTAKES[command].items():
        for value in values:
            code = main([command, *required_args(parser, tmp_path), flag, value])
            line = one_error_line(capsys)
            name = flag.removeprefix("--")
            assert code != 0 and (flag in line or name.replace("-", "_") in line), (flag, value, line)


def test_seed_range_is_what_numpy_and_torch_accept(tmp_path: Path, capsys) -> None:
    import numpy as np

    from tinylm.cli.option_types import seed
    from tinylm.options import SEED_LIMIT

    assert seed(str(SEED_LIMIT - 1)) == SEED_LIMIT - 1
    np.random.RandomState(SEED_LIMIT - 1)
    torch.Generator().manual_seed(SEED_LIMIT - 1)
    with pytest.raises(ValueError):
        np.random.RandomState(SEED_LIMIT)  # one past the limit is what numpy refuses
    assert main(["generate", "--checkpoint", str(tmp_path), "--seed", str(SEED_LIMIT)]) == 2
    assert "[0, 4294967295]" in one_error_line(capsys)


# ---- --config values get the flags' checks -----------------------------------------------------
def test_config_values_are_checked_like_flags_for_every_option_of_every_command(tmp_path: Path) -> None:
    """A float or a list where an integer belongs, a non-bool for a flag, a bad choice: one line naming key and file."""
    checked = 0
    for command, parser in subcommands().items():
        for action in value_actions(parser):
            key = action.dest
            mistakes = []
            if is_integer(action):
                mistakes += [2.5, True]
            if action.nargs == 0:
                mistakes += ["yes", 1]
            elif action.nargs is None and not isinstance(action.default, list):
                mistakes.append([1, 2])
            if action.choices:
                mistakes.append("not-a-choice")
            for value in mistakes:
                source = write_options(tmp_path, {key: value})
                line = parse_error([command, "--config", source, *required_args(parser, tmp_path)])
                assert key in line and source in line, (command, key, value, line)
                checked += 1
    assert checked > 100


def test_config_range_checks_are_the_flags_own(tmp_path: Path, capsys) -> None:
    for options in ({"seed": -1}, {"max-new-tokens": 10**12}, {"top_k": 0}):
        assert main(["generate", "--config", write_options(tmp_path, options)]) == 1
        assert "must be an integer in" in one_error_line(capsys)


@pytest.mark.parametrize("content, words", [
    (b"\xff\xfeseed = 1\n", "is not UTF-8"),
    (b"seed = = 1\n", "cannot parse config file"),
    (b"[1, 2]", "must hold a table"),
])
def test_unreadable_config_files_are_one_line(tmp_path: Path, capsys, content: bytes, words: str) -> None:
    path = tmp_path / ("options.json" if content.startswith(b"[") else "options.toml")
    path.write_bytes(content)
    assert main(["generate", "--config", str(path)]) == 1
    assert words in one_error_line(capsys)


def test_required_options_can_come_from_the_config_of_every_command(tmp_path: Path) -> None:
    for command, parser in subcommands().items():
        required = [a for a in value_actions(parser) if a.required]
        options = {a.dest: (["a", "b"] if a.nargs == "+" else f"from-file-{a.dest}") for a in required}
        args = parse_command_line([command, "--config", write_options(tmp_path, options)])
        assert {a.dest: getattr(args, a.dest) for a in required} == options, command


def test_keys_take_dashes_or_underscores_and_flag_or_destination_names(tmp_path: Path) -> None:
    spellings = [{"max-new-tokens": 7, "top_k": 3, "int8": True}, {"max_new_tokens": 7, "top-k": 3, "int8": True}]
    for options in spellings:
        args = parse_command_line(["generate", "--config", write_options(tmp_path, options), "--checkpoint", "x"])
        assert (args.max_new_tokens, args.top_k, args.int8) == (7, 3, True)
    by_flag = parse_command_line(["train", "--config", write_options(tmp_path, {"no-progress": True})])
    by_dest = parse_command_line(["train", "--config", write_options(tmp_path, {"progress": False})])
    assert by_flag.progress is False and by_dest.progress is False
    for command in ("train", "report", "compare"):  # one key name, `set`, whatever the option's destination
        args = parse_command_line([command, "--config", write_options(tmp_path, {"set": ["n_blocks=1"]})])
        assert [*vars(args).get("set", []), *vars(args).get("overrides", [])] == ["n_blocks=1"]


def test_every_key_of_every_command_is_accepted(tmp_path: Path) -> None:
    """No option is left out of files: each key is known (its value may still be refused, never as unknown)."""
    for command, parser in subcommands().items():
        for key in option_keys(parser):
            try:
                parse_command_line([command, "--config", write_options(tmp_path, {key: "x"}),
                                    *required_args(parser, tmp_path)])
            except TinyLMError as refused:
                assert "unknown option(s)" not in str(refused), (command, key)


def test_command_line_wins_and_repeatable_options_add_up(tmp_path: Path) -> None:
    source = write_options(tmp_path, {"seed": 5, "checkpoint": "a"})
    args = parse_command_line(["generate", "--config", source, "--seed", "7", "--checkpoint", "b"])
    assert args.seed == 7 and args.checkpoint == "b"
    assert parse_command_line(["generate", "--config", source]).seed == 5
    args = parse_command_line(["report", "--config", write_options(tmp_path, {"set": {"n_head": 2}}),
                               "--set", "n_blocks=1"])
    assert args.overrides == ["n_head=2", "n_blocks=1"]


def test_config_cannot_set_exclusive_options_together_or_a_key_twice(tmp_path: Path, capsys) -> None:
    assert main(["generate", "--config", write_options(tmp_path, {"prompt": "a", "prompt-file": "b"})]) == 1
    assert "exclude each other" in one_error_line(capsys)
    assert main(["generate", "--config", write_options(tmp_path, {"top-k": 2, "top_k": 3})]) == 1
    assert "twice" in one_error_line(capsys)


def test_argparse_mistakes_are_one_line_with_exit_2(capsys) -> None:
    assert main(["generate"]) == 2
    assert "--checkpoint" in one_error_line(capsys)
    assert main(["no-such-command"]) == 2
    assert "invalid choice" in one_error_line(capsys)


# ---- failures raised while a command runs ------------------------------------------------------
def real_cpu_oom() -> RuntimeError:
    try:
        torch.empty(2**50, dtype=torch.uint8)  # a petabyte: refused at once, nothing allocated
    except RuntimeError as exc:
        return exc
    raise AssertionError("a petabyte allocation succeeded")


def test_today_cpu_out_of_memory_text_is_recognised() -> None:
    oom = real_cpu_oom()
    assert is_oom(oom), str(oom)
    assert is_oom(torch.OutOfMemoryError("CUDA out of memory. Tried to allocate 2.00 GiB"))
    assert is_oom(MemoryError())
    assert not is_oom(RuntimeError("size mismatch, m1: [2 x 3], m2: [4 x 5]"))
    assert "1,048,576.0 GiB" in user_message(oom)


@pytest.mark.parametrize("failure, words", [
    (real_cpu_oom(), "out of memory"),
    (torch.OutOfMemoryError("CUDA out of memory. Tried to allocate 2.00 GiB"), "out of memory"),
    (OSError(errno.EROFS, os.strerror(errno.EROFS), "/ro/out"), "cannot use /ro/out: Read-only file system"),
    (OSError(errno.ENOSPC, os.strerror(errno.ENOSPC)), "No space left on device"),
    (ValueError("invalid override 'x=1': unknown model field 'x'"), "unknown model field"),
])
def test_a_command_failing_this_way_prints_one_line(monkeypatch, capsys, failure: BaseException, words: str) -> None:
    def fail(args: argparse.Namespace) -> int:
        raise failure

    monkeypatch.setattr(generate_command, "run", fail)
    assert main(["generate", "--checkpoint", "x"]) == 1
    assert words in one_error_line(capsys)


def test_a_bug_keeps_its_traceback(monkeypatch) -> None:
    def bug(args: argparse.Namespace) -> int:
        raise KeyError("a bug in tinylm, not the user's mistake")

    monkeypatch.setattr(generate_command, "run", bug)
    with pytest.raises(KeyError):
        main(["generate", "--checkpoint", "x"])


def test_safetensors_io_errors_are_io_failures() -> None:
    from safetensors import SafetensorError

    refused = SafetensorError('Error while serializing: I/O error: Read-only file system (os error 30) at path "x"')
    assert io_failure(refused) == "Read-only file system"
    assert io_failure(SafetensorError("Error while deserializing header: HeaderTooLarge")) is None
    assert io_failure(BrokenPipeError(errno.EPIPE, "Broken pipe")) is None  # a closed reader is not an error


def test_ranks_name_themselves() -> None:
    assert error_prefix({}) == "tinylm: error: "
    assert error_prefix({"WORLD_SIZE": "1", "RANK": "0"}) == "tinylm: error: "
    assert error_prefix({"WORLD_SIZE": "4", "RANK": "3"}) == "tinylm: error: [rank 3/4] "


@pytest.mark.slow  # two processes that import torch: 3 s on an idle machine, 15 s on a busy one
def test_under_torchrun_each_rank_prints_one_line_and_no_traceback(tmp_path: Path) -> None:
    torchrun = Path(sys.executable).with_name("torchrun")
    if not torchrun.exists():
        pytest.skip("torchrun is not installed next to this interpreter")
    env = {**os.environ, "OMP_NUM_THREADS": "1"}
    result = subprocess.run([str(torchrun), "--nproc_per_node=2", "-m", "tinylm", "generate", "--checkpoint",
                             str(tmp_path / "nope")], capture_output=True, text=True, env=env, timeout=300)
    ours = [line for line in result.stderr.splitlines() if line.startswith("tinylm: error:")]
    assert result.returncode == 1
    # torchrun stops the other rank once one fails, so it may not get to say anything
    expected = {f"tinylm: error: [rank {r}/2] checkpoint not found: {tmp_path / 'nope'}" for r in (0, 1)}
    assert 1 <= len(ours) <= 2 and len(set(ours)) == len(ours) and set(ours) <= expected, result.stderr
    assert "tinylm/" not in result.stderr  # no frame of our code: the ranks exited cleanly with status 1
