"""Launch, stop and resume from the studio: real `tinylm train` processes, options checked as the CLI checks them."""

from __future__ import annotations

from pathlib import Path

import httpx
import pytest

from studio_support import studio
from test_train_support import MICRO, cli_args, data_dir, wait_for
from tinylm.cli.main import main
from tinylm.options import option_specs
from tinylm.stages import STAGES
from tinylm.studio import launch as launcher
from tinylm.studio.launch import command_line, stage_forms
from tinylm.train.run_status import read_status, run_state

pytestmark = pytest.mark.usefixtures("one_thread")


def micro_options(**changes: object) -> dict[str, object]:
    """The form values of the tests' micro pretraining run (test_train_support.cli_args, as a form sends them)."""
    return {"data": str(data_dir()), "overrides": {k: v for k, v in MICRO.items()}, "batch_size": 4, "seq_len": 16,
            "warmup_steps": 2, "log_every": 1, "eval_every": 0, "eval_batches": 4, "sample_tokens": 0, "seed": 3,
            "threads": 1, "dtype": "fp32", "compile": "off", "attention": "sdpa", **changes}


def test_every_stage_has_a_form_with_its_option_fields() -> None:
    forms = {f["stage"]: f for f in stage_forms()}
    assert list(forms) == list(STAGES) and forms["pretrain"]["command"] == "train"
    for name, spec in STAGES.items():
        names = {f["name"] for f in forms[name]["fields"]}
        assert names == {o.name for o in option_specs(spec.config)} - {"out", "resume"}
    batch = next(f for f in forms["pretrain"]["fields"] if f["name"] == "batch_size")
    assert (batch["flag"], batch["kind"], batch["low"]) == ("--batch-size", "int", 1)
    assert next(f for f in forms["sft"]["fields"] if f["name"] == "base")["required"]


@pytest.mark.parametrize("values, message", [
    ({"batch_size": 0}, "--batch-size must be >= 1 (got 0)"),
    ({"batch_size": "many"}, "--batch-size takes a whole number, got 'many'"),
    ({"optimizer": "sgd"}, "--optimizer must be one of"),
    ({"nope": 1}, "train has no option 'nope'"),
    ({"overrides": ["n_head"]}, "--set takes NAME=VALUE items"),
    # refused by the stage's config, as `tinylm train` refuses them (the preview and the launch said nothing of
    # these, and the launched process failed at once, leaving a failed run in the list)
    ({"preset": "huge"}, "unknown preset 'huge': choose one of tiny"),
    ({"lr": 1e308}, "--lr must be <= 10 (an lr above 10 diverges at the first step; more is a typo) (got 1e+308)"),
    ({"max_steps": 1e30}, "--max-steps must be <= 1000000000 (a billion steps is years of training"),
    ({"max_steps": 2**63}, "--max-steps must be <= 1000000000"),
    ({"max_steps": 5.5}, "--max-steps takes a whole number, got 5.5"),
    ({"overrides": {"n_head": 7}}, "invalid config"),
])
def test_a_bad_value_gets_the_command_lines_message(values: dict, message: str, tmp_path: Path) -> None:
    with studio(tmp_path) as url:
        body = {"stage": "pretrain", "name": "x", "options": values}
        for route in ("preview", "launch"):
            reply = httpx.post(f"{url}/api/{route}", json=body)
            assert reply.status_code == 400 and message in reply.json()["error"]["message"], reply.text
            assert "\n" not in reply.json()["error"]["message"]  # one line
        assert not (tmp_path / "x").exists()  # nothing started, nothing written


def test_the_command_line_refuses_an_absurd_lr_or_step_count_as_the_studio_does(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(cli_args(tmp_path / "x", "--lr", "1e308")) == 1
    assert main(cli_args(tmp_path / "x", "--max-steps", "10000000000000000000000")) == 1
    err = capsys.readouterr().err
    assert "--lr must be <= 10 (an lr above 10 diverges" in err and "--max-steps must be <= 1000000000" in err
    assert not (tmp_path / "x").exists()


def test_a_resume_to_fewer_steps_than_the_run_reached_is_refused_here_and_by_the_engine(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """A run at step 3 resumed with max_steps 2 was accepted and "finished: reached --max-steps 2" at 3 of 2."""
    run = tmp_path / "done"
    assert main(cli_args(run, "--max-steps", "3")) == 0
    before = (run / "status.json").read_text()
    with studio(tmp_path) as url:
        reply = httpx.post(f"{url}/api/resume", json={"name": "done", "options": {"max_steps": 2}})
        assert reply.status_code == 400 and reply.json()["error"]["message"] == (
            "--max-steps 2 is not beyond the run's step 3")
    assert not (run / "console.log").exists()  # nothing started
    capsys.readouterr()
    assert main(cli_args(run, "--resume", "latest", "--max-steps", "2")) == 1  # the command line: the same line
    assert "--max-steps 2 is not beyond the run's step 3" in capsys.readouterr().err
    assert (run / "status.json").read_text() == before  # still finished at 3, not "finished" at 3 of 2


def test_a_second_resume_while_the_first_is_starting_is_refused(tmp_path: Path) -> None:
    """Two resumes a second apart both started a process: the second found the folder's lock free (the first was
    still importing), failed on it, and wrote its errors into the run's console.log."""
    run = tmp_path / "twice"
    assert main(cli_args(run, "--max-steps", "3")) == 0
    with studio(tmp_path) as url:
        first = httpx.post(f"{url}/api/resume", json={"name": "twice", "options": {"max_steps": 5}})
        assert first.status_code == 200, first.text
        second = httpx.post(f"{url}/api/resume", json={"name": "twice", "options": {"max_steps": 6}})
        assert second.status_code == 409 and second.json()["error"]["message"] == "twice is running"
        again = httpx.post(f"{url}/api/launch", json={"stage": "pretrain", "name": "twice", "options": {}})
        assert again.status_code == 409
        wait_for(lambda: launcher._CHILDREN[run.resolve()].poll() is not None)
    assert read_status(run)["status"] == "finished" and read_status(run)["step"] == 5
    console = (run / "console.log").read_text()
    assert console.count("resumed from") == 1 and "in use by" not in console


def test_the_preview_is_the_command_line() -> None:
    argv = command_line("pretrain", {"batch_size": 8, "overrides": {"n_kv_head": 1}, "progress": False,
                                     "fsdp": False}, Path("runs/x"))
    # the engine's options, then the stage's own (its config extends the engine's)
    assert argv == ["train", "--out", "runs/x", "--batch-size", "8", "--no-progress", "--set", "n_kv_head=1"]


def test_requests_from_another_site_or_not_json_are_refused(tmp_path: Path) -> None:
    with studio(tmp_path) as url:
        body = {"stage": "pretrain", "name": "x", "options": {}}
        assert httpx.post(f"{url}/api/launch", content=str(body), headers={"content-type": "text/plain"}
                          ).status_code == 415
        assert httpx.post(f"{url}/api/launch", json=body, headers={"origin": "http://evil.example"}).status_code == 403
        assert httpx.post(f"{url}/api/launch", json={**body, "name": "../out"}).status_code == 400
        assert httpx.post(f"{url}/api/launch", json={**body, "stage": "nope"}).status_code == 404


def test_launch_stop_and_resume_a_real_run(tmp_path: Path) -> None:
    run = tmp_path / "live"
    with studio(tmp_path) as url:
        started = httpx.post(f"{url}/api/launch", json={"stage": "pretrain", "name": "live",
                                                        "options": micro_options(max_steps=100000)}).json()
        assert started["argv"][:4] == ["tinylm", "train", "--out", str(run)]
        wait_for(lambda: (s := read_status(run)) is not None and s["status"] == "running" and s["step"] >= 3)
        assert httpx.post(f"{url}/api/launch", json={"stage": "pretrain", "name": "live",
                                                     "options": {}}).status_code == 409  # a run is there
        assert httpx.post(f"{url}/api/resume", json={"name": "live"}).status_code == 409  # it is running
        assert httpx.post(f"{url}/api/stop", json={"name": "live"}).json()["signalled"] == started["pid"]
        wait_for(lambda: run_state(run) == "stopped")
        stopped_at = read_status(run)["step"]
        assert httpx.post(f"{url}/api/stop", json={"name": "live"}).status_code == 409  # nothing to stop
        resumed = httpx.post(f"{url}/api/resume", json={"name": "live", "options": {"max_steps": stopped_at + 5}})
        assert resumed.status_code == 200 and "--resume" in resumed.json()["argv"]
        wait_for(lambda: run_state(run) == "finished")
    assert read_status(run)["step"] == stopped_at + 5
    console = (run / "console.log").read_text()
    assert "resumed from" in console and "stopped at step" in console  # both processes wrote their lines


def test_a_run_outlives_the_studio_that_launched_it(tmp_path: Path) -> None:
    """Launched in its own session: the studio stops, the run trains on, a new studio finds it live and stops it."""
    run = tmp_path / "outlives"
    with studio(tmp_path) as url:
        httpx.post(f"{url}/api/launch", json={"stage": "pretrain", "name": "outlives",
                                              "options": micro_options(max_steps=100000)}).raise_for_status()
        wait_for(lambda: (s := read_status(run)) is not None and s["step"] >= 2)
    step = read_status(run)["step"]
    wait_for(lambda: read_status(run)["step"] > step + 5)  # no studio: still training
    with studio(tmp_path) as url:
        assert httpx.get(f"{url}/api/run", params={"name": "outlives"}).json()["status"] == "running"
        httpx.post(f"{url}/api/stop", json={"name": "outlives"}).raise_for_status()
        wait_for(lambda: run_state(run) == "stopped")


@pytest.mark.slow
def test_a_torchrun_run_launched_from_a_form_stops_whole_and_resumes_on_its_processes(tmp_path: Path) -> None:
    """Two workers under torchrun: stop sends one SIGTERM to each worker; both agree on the step, the checkpoint is
    whole, torchrun exits 0 with no traceback, and resume starts torchrun again with the world size status.json
    recorded."""
    run = tmp_path / "two"
    with studio(tmp_path) as url:
        body = {"stage": "pretrain", "name": "two", "options": micro_options(max_steps=100000), "processes": 2}
        preview = httpx.post(f"{url}/api/preview", json=body).json()["argv"]
        assert preview[:6] == ["torchrun", "--standalone", "--nproc-per-node=2", "-m", "tinylm", "train"]
        started = httpx.post(f"{url}/api/launch", json=body).json()
        assert started["argv"] == preview[:6] + ["--out", str(run)] + preview[8:]
        wait_for(lambda: (s := read_status(run)) is not None and s["step"] >= 3)
        status = read_status(run)
        assert status["world_size"] == 2 and status["launcher_pid"] == started["pid"]
        stop = httpx.post(f"{url}/api/stop", json={"name": "two"}).json()
        assert stop["signalled"] == started["pid"] and status["pid"] in stop["workers"] and len(stop["workers"]) == 2
        wait_for(lambda: run_state(run) == "stopped")
        stopped_at = read_status(run)["step"]
        # the workers were signalled, not torchrun: they saved and exited 0, and torchrun ended quietly (a SIGTERM
        # to torchrun printed its 30-line SignalException traceback into the console)
        assert launcher._CHILDREN[run.resolve()].wait(timeout=60) == 0
        console = (run / "console.log").read_text()
        assert "Traceback" not in console and "SignalException" not in console and "ChildFailedError" not in console
        wait_for(lambda: (run / "checkpoints" / f"step_{stopped_at:08d}" / "train_state.pt").is_file())
        resumed = httpx.post(f"{url}/api/resume", json={"name": "two", "options": {"max_steps": stopped_at + 3}})
        assert resumed.json()["argv"][:3] == ["torchrun", "--standalone", "--nproc-per-node=2"]
        wait_for(lambda: run_state(run) == "finished")
    assert read_status(run)["step"] == stopped_at + 3 and read_status(run)["world_size"] == 2
    assert f"stopped at step {stopped_at}" in (run / "console.log").read_text()


@pytest.mark.parametrize("processes", [0, -1, 65, 1.5, "2", True])
def test_a_bad_process_count_is_refused_with_its_range(tmp_path: Path, processes: object) -> None:
    with studio(tmp_path) as url:
        reply = httpx.post(f"{url}/api/launch", json={"stage": "pretrain", "name": "x", "processes": processes,
                                                      "options": micro_options()})
        assert reply.status_code == 400 and "processes must be a whole number from 1 to 64" in reply.text
    assert not (tmp_path / "x").exists()
