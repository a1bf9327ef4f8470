"""`tinylm train` and `tinylm plot` from the command line, and exact resume after a SIGKILL."""

from __future__ import annotations

import json
import os
import signal
from pathlib import Path
from typing import Any

import pytest
import torch

from test_train_support import cli_args, config, hooked_build_model, losses, rows, train_process, wait_for
from tinylm.checkpoint import list_checkpoints
from tinylm.cli.main import main
from tinylm.stages.pretrain import pretrain
from tinylm.stages.pretrain import stage as pretrain_stage
from tinylm.train import optim


def test_train_prints_summary_and_sample(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(cli_args(tmp_path, "--max-steps", "3", "--sample-tokens", "8", "--prompt", "def")) == 0
    out = capsys.readouterr().out
    assert "done: step 3, train loss" in out and "bits/byte" in out
    assert f"checkpoint: {tmp_path}/checkpoints/step_00000003" in out
    assert "sample:\ndef" in out


def test_overrides_and_config_file(tmp_path: Path) -> None:
    options = tmp_path / "train.toml"
    options.write_text('max-steps = 2\nkeep_last = 5\nset = ["rope_theta=500", "n_blocks=2"]\n')
    args = cli_args(tmp_path / "run", "--config", str(options), "--set", "qk_norm=true")  # has n_blocks=1
    assert main(args) == 0
    meta = json.loads((list_checkpoints(tmp_path / "run")[-1] / "config.json").read_text())
    assert meta["step"] == 2 and meta["train"]["keep_last"] == 5
    assert meta["model"]["rope_theta"] == 500.0 and meta["model"]["qk_norm"] is True
    assert meta["model"]["n_blocks"] == 1  # the command line wins over the file
    table = tmp_path / "table.toml"
    table.write_text("max-steps = 1\n[set]\nsliding_window = 8\n")
    assert main([*cli_args(tmp_path / "run2"), "--config", str(table)]) == 0
    meta = json.loads((list_checkpoints(tmp_path / "run2")[-1] / "config.json").read_text())
    assert meta["model"]["sliding_window"] == 8


@pytest.mark.parametrize(("extra", "message"), [
    (["--set", "nope=1"], "unknown model field 'nope'"),
    (["--set", "n_head=3"], "n_head"),
    (["--batch-size", "0"], "--batch-size must be >= 1"),
    (["--seq-len", "64"], "exceeds the model's context_length 32"),
    (["--device", "cuda:7"], "cuda"),
    (["--fsdp"], "torchrun"),
])
def test_user_mistakes_are_one_line(tmp_path: Path, capsys: pytest.CaptureFixture[str], extra: list[str],
                                    message: str) -> None:
    assert main(cli_args(tmp_path, "--max-steps", "1", *extra)) == 1
    err = capsys.readouterr().err.strip().splitlines()
    assert err[-1].startswith("tinylm: error:") and message in err[-1], err
    assert "Traceback" not in "\n".join(err)


def test_exit_codes_for_nan_and_interrupt(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    def nan(module: torch.nn.Module, args: Any, output: Any) -> Any:
        return (output[0], output[1] * float("nan")) if module.training else None

    monkeypatch.setattr(pretrain_stage, "build_model", hooked_build_model(nan))
    assert main(cli_args(tmp_path / "nan", "--max-steps", "3")) == 1
    assert not list_checkpoints(tmp_path / "nan")  # nothing good to keep: nothing saved

    def ctrl_c(module: torch.nn.Module, args: Any, output: Any) -> None:
        if module.training:
            os.kill(os.getpid(), signal.SIGINT)

    monkeypatch.setattr(pretrain_stage, "build_model", hooked_build_model(ctrl_c))
    assert main(cli_args(tmp_path / "int", "--max-steps", "3")) == 130
    assert [p.name for p in list_checkpoints(tmp_path / "int")] == ["step_00000001"]


def test_plot_command(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    pretrain(config(tmp_path / "a", max_steps=3))
    pretrain(config(tmp_path / "b", max_steps=2))
    (tmp_path / "a" / "loss.png").unlink()
    assert main(["plot", str(tmp_path / "a")]) == 0
    assert (tmp_path / "a" / "loss.png").is_file()
    assert main(["plot", str(tmp_path / "a"), str(tmp_path / "b"), "--out", str(tmp_path / "ab.png")]) == 0
    assert (tmp_path / "ab.png").stat().st_size > 1000
    assert main(["plot", str(tmp_path / "missing")]) == 1
    assert "no metrics.jsonl" in capsys.readouterr().err


def test_cli_choices_match_the_engine() -> None:
    """The flag's choices are the engine's registry itself (generated from the option field), not a copy."""
    from tinylm.cli.main import command_parser

    optimizer = next(a for a in command_parser("train")._actions if a.dest == "optimizer")
    assert tuple(optimizer.choices) == optim.OPTIMIZERS


def test_sigkill_between_checkpoints_then_resume_is_bit_identical(tmp_path: Path) -> None:
    """Kill -9 a run after step 22 (checkpoint at 20), resume: every loss equals an uninterrupted run's.

    The kill lands some steps after the poll sees step 22; checkpoints 20 steps apart leave a window wide
    enough that it still lands before the next one on a fast machine (5 apart did not, once)."""
    schedule = ["--schedule-steps", "40", "--checkpoint-every", "20"]
    pretrain(config(tmp_path / "straight", max_steps=40, schedule_steps=40, checkpoint_every=20))

    killed = tmp_path / "killed"
    proc = train_process(killed, "--max-steps", "100000", *schedule)
    try:
        wait_for(lambda: (killed / "metrics.jsonl").is_file() and any(r.get("step", 0) >= 22 for r in rows(killed)),
                 process=proc)
        proc.send_signal(signal.SIGKILL)
    finally:
        proc.wait(timeout=30)
    assert proc.returncode == -signal.SIGKILL
    saved = list_checkpoints(killed)
    assert saved and int(saved[-1].name.split("_")[1]) % 20 == 0
    assert max(r["step"] for r in rows(killed)) > int(saved[-1].name.split("_")[1])  # killed past a checkpoint

    assert main(cli_args(killed, "--max-steps", "40", "--resume", "latest", *schedule)) == 0
    assert [r["step"] for r in rows(killed) if "loss" in r] == list(range(1, 41))
    assert losses(killed) == losses(tmp_path / "straight")


@pytest.mark.parametrize(("flag", "value"), [("--temperature", "nan"), ("--temperature", "-1"), ("--top-k", "0")])
def test_sampling_options_are_checked_before_training(tmp_path: Path, capsys: pytest.CaptureFixture[str],
                                                      flag: str, value: str) -> None:
    """Issue 11.6: a bad sampling option used to train, save, then fail at the final sample."""
    assert main(cli_args(tmp_path / "run", "--max-steps", "2", flag, value)) == 1
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and err[0].startswith("tinylm: error:") and flag.lstrip("-").replace("-", "_") in err[0]
    assert not (tmp_path / "run").exists()  # nothing trained, nothing written
