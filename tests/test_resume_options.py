"""A resumed run takes its model, data and options from the run itself (issue: the help's own
`--resume latest` example failed because today's defaults replaced the run's preset and --set values)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from test_rl import TASK as RL_TASK
from test_rl import rl_args
from test_sft import TASK as SFT_TASK
from test_sft import base_run, sft_args
from test_train_support import MICRO, data_dir, losses
from tinylm.checkpoint import list_checkpoints
from tinylm.cli.main import main

pytestmark = pytest.mark.usefixtures("one_thread")


def first_run(out: Path) -> list[str]:
    sets = [f"--set={k}={v}" for k, v in {**MICRO, "n_embed": 48, "qk_norm": True}.items()]
    return ["train", "--data", str(data_dir()), "--out", str(out), *sets, "--batch-size", "3", "--seq-len", "16",
            "--warmup-steps", "2", "--log-every", "1", "--eval-every", "0", "--eval-batches", "2",
            "--sample-tokens", "0", "--no-progress", "--seed", "5", "--threads", "1", "--lr", "0.002",
            "--dtype", "fp32", "--compile", "off", "--attention", "sdpa", "--max-steps", "3"]


def test_resume_latest_continues_with_the_runs_model_data_and_options(tmp_path: Path,
                                                                       capsys: pytest.CaptureFixture[str]) -> None:
    out = tmp_path / "run"
    assert main(first_run(out)) == 0
    capsys.readouterr()
    # only the run folder and the new budget: no --data, no --set, no batch size, no lr
    assert main(["train", "--out", str(out), "--resume", "latest", "--max-steps", "5", "--no-progress",
                 "--sample-tokens", "0"]) == 0
    err = capsys.readouterr().err
    assert "resuming with the run's own options" in err and "overrides=" in err and "data=" in err
    meta = json.loads((list_checkpoints(out)[-1] / "config.json").read_text())
    assert meta["step"] == 5 and meta["model"]["n_embed"] == 48 and meta["model"]["qk_norm"] is True
    assert meta["train"]["batch_size"] == 3 and meta["train"]["lr"] == 0.002 and meta["train"]["seed"] == 5
    assert meta["train"]["max_steps"] == 5  # the flag that was given wins
    assert len(losses(out)) == 5


def test_resumed_run_equals_an_uninterrupted_one(tmp_path: Path) -> None:
    # the schedule is a function of its length, so both runs plan 5 steps
    assert main([*first_run(tmp_path / "whole")[:-1], "5", "--schedule-steps", "5"]) == 0
    assert main([*first_run(tmp_path / "split"), "--schedule-steps", "5"]) == 0
    assert main(["train", "--out", str(tmp_path / "split"), "--resume", "latest", "--max-steps", "5",
                 "--no-progress"]) == 0
    assert losses(tmp_path / "split") == losses(tmp_path / "whole")


def test_a_flag_that_changes_the_model_on_resume_is_refused(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    out = tmp_path / "run"
    assert main(first_run(out)) == 0
    capsys.readouterr()
    assert main(["train", "--out", str(out), "--resume", "latest", "--set", "n_embed=64", "--max-steps", "4",
                 "--no-progress"]) == 1
    assert "n_embed" in capsys.readouterr().err



def test_sft_resumes_with_only_out_resume_and_max_steps(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """What `tinylm sft --help` shows: no --base, no --data; the run supplies them (it said "required: --base")."""
    out = tmp_path / "sft"
    assert main([*sft_args(out), "--max-steps", "2"]) == 0
    capsys.readouterr()
    assert main(["sft", "--out", str(out), "--resume", "latest", "--max-steps", "3"]) == 0
    assert "resuming with the run's own options" in capsys.readouterr().err
    meta = json.loads((list_checkpoints(out)[-1] / "config.json").read_text())
    assert meta["step"] == 3 and meta["train"]["base"] == str(base_run()) and meta["train"]["data"] == SFT_TASK
    assert meta["train"]["lr"] == 0.003 and meta["train"]["seq_len"] == 32


def test_rl_resumes_with_only_out_resume_and_max_steps(tmp_path: Path) -> None:
    out = tmp_path / "rl"
    assert main(rl_args(out, "grpo", "--max-steps", "1")) == 0
    assert main(["rl", "--out", str(out), "--resume", "latest", "--max-steps", "2", "--no-progress"]) == 0
    meta = json.loads((list_checkpoints(out)[-1] / "config.json").read_text())
    assert meta["step"] == 2 and meta["train"]["task"] == RL_TASK and meta["train"]["reward"] == "test_rl:varied_reward"
    assert meta["train"]["group_size"] == 3


@pytest.mark.parametrize("out", ["empty", None])
def test_resume_with_no_run_and_no_base_is_one_clear_line(tmp_path: Path, capsys: pytest.CaptureFixture[str],
                                                          monkeypatch: pytest.MonkeyPatch, out: str | None) -> None:
    monkeypatch.chdir(tmp_path)
    where = ["--out", str(tmp_path / out)] if out else []
    assert main(["sft", *where, "--resume", "latest", "--max-steps", "3"]) == 1
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "no --base" in err[0], err
    assert not (tmp_path / "runs").exists()


def test_a_fresh_post_training_run_still_needs_base(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["sft", "--max-steps", "1"]) == 1
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "--base is required" in err[0], err
