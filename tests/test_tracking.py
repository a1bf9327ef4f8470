"""`--tensorboard [DIR]` and `--wandb` on every training stage, read back with each tool's own reader.

The trackers are where users already look, so they must show what metrics.jsonl says: the same steps, the
same values (TensorBoard keeps float32 scalars, W&B the JSON numbers) and each stage's own keys (DPO's reward
margin, RL's reward...). Every stage runs a few real micro steps through its command line with both on; W&B
runs with WANDB_MODE unset, as for a user who never set W&B up, so it must go offline: no login, no network.
"""

from __future__ import annotations

import json
import os
import shutil
import struct
import zlib
from collections import defaultdict
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from test_dpo import dpo_args
from test_reward import reward_args
from test_rl import rl_args
from test_sft import sft_args
from test_train_support import cli_args, rows
from test_train_support import config as pretrain_config
from tinylm.checkpoint import list_checkpoints
from tinylm.cli.main import main, parse_command_line
from tinylm.stages import STAGES, command_of
from tinylm.stages.pretrain import pretrain
from tinylm.stages.pretrain.config import PretrainConfig

wandb = pytest.importorskip("wandb", reason="the dev extras install wandb")
pytest.importorskip("tensorboard", reason="the dev extras install tensorboard")
pytestmark = pytest.mark.usefixtures("one_thread")

# each stage's command line for a micro run of 2-3 steps with an evaluation between (helpers of its own tests)
COMMANDS: dict[str, Callable[[Path], list[str]]] = {
    "pretrain": lambda out: cli_args(out, "--max-steps", "3", "--eval-every", "2"),
    "sft": lambda out: sft_args(out, "--max-steps", "3", "--eval-every", "2"),
    "reward": lambda out: reward_args(out, "--max-steps", "3"),
    "dpo": lambda out: dpo_args(out, "--max-steps", "3"),
    "rl": lambda out: rl_args(out, "grpo", "--max-steps", "2"),
}
OWN_KEYS = {"pretrain": ("loss", "dev_bpb"), "sft": ("loss", "exact_match"),
            "reward": ("reward_accuracy", "dev_margin"), "dpo": ("reward_margin", "dev_logp_accuracy"),
            "rl": ("reward", "kl", "exact_match")}
EXPLICIT_DIR = ("sft", "dpo")  # `--tensorboard DIR` outside the run folder; the others the bare flag (RUN/tensorboard)


@pytest.fixture(scope="module")
def fresh_wandb(tmp_path_factory: pytest.TempPathFactory) -> Iterator[None]:
    """W&B as a user who never set it up sees it: no WANDB_* variable (no mode, no key); its home folders private.

    Module-wide: W&B reads its environment once per process.
    """
    home = tmp_path_factory.mktemp("wandb_home")
    with pytest.MonkeyPatch.context() as patch:
        for name in [name for name in os.environ if name.startswith("WANDB_")]:
            patch.delenv(name)
        for name in ("CONFIG", "CACHE", "DATA"):
            patch.setenv(f"WANDB_{name}_DIR", str(home / name.lower()))
        yield
        wandb.teardown()


def tensorboard_scalars(log_dir: Path) -> dict[str, list[tuple[int, float]]]:
    """{tag: [(step, value)]} as TensorBoard itself loads the folder (purged and ordered as it shows them)."""
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

    events = EventAccumulator(str(log_dir), size_guidance={"scalars": 0})  # 0: keep every point
    events.Reload()
    return {tag: [(e.step, e.value) for e in events.Scalars(tag)] for tag in events.Tags()["scalars"]}


def numbers(row: dict[str, Any]) -> dict[str, Any]:
    """What a tracker gets of a metrics row: its numbers but the step."""
    return {k: v for k, v in row.items() if isinstance(v, (int, float)) and k != "step"}


def as_float32(metrics: list[dict[str, Any]]) -> dict[str, list[tuple[int, float]]]:
    """metrics.jsonl as TensorBoard should hold it: every number, at its step, rounded to float32."""
    series: dict[str, list[tuple[int, float]]] = defaultdict(list)
    for row in metrics:
        for key, value in numbers(row).items():
            series[key].append((row["step"], float(np.float32(value))))
    return dict(series)


def wandb_records(path: Path) -> list[Any]:
    """The records of a run-ID.wandb file, each parsed by W&B's own protobuf `Record`.

    wandb >= 0.30 has no Python reader of the file any more (its Go core writes it); the framing is LevelDB's
    log format, as W&B's former wandb/sdk/internal/datastore.py read it: a 7-byte header (":W&B", magic 0xBEE1,
    version 0), then 32 KiB blocks of chunks (crc32 seeded by the chunk type, uint16 length, type: 1 a whole
    record, 2/3/4 its first/middle/last part), a block's last < 7 bytes zero padding.
    """
    from wandb.proto.wandb_internal_pb2 import Record

    data = path.read_bytes()
    assert data[:7] == struct.pack("<4sHB", b":W&B", 0xBEE1, 0), "not a W&B transaction log"
    block, position, parts, records = 32768, 7, b"", []
    while position < len(data):
        if block - position % block < 7:
            position += block - position % block
            continue
        checksum, length, kind = struct.unpack_from("<IHB", data, position)
        chunk = data[position + 7:position + 7 + length]
        assert checksum == zlib.crc32(chunk, zlib.crc32(bytes([kind]))), f"bad checksum at byte {position}"
        position += 7 + length
        parts += chunk
        if kind in (1, 4):  # a whole record, or its last part
            record = Record()
            record.ParseFromString(parts)
            records.append(record)
            parts = b""
    return records


def _key(item: Any) -> str:
    return item.key or ".".join(item.nested_key)  # newer releases write nested_key, older ones key


def offline_run(run: Path) -> tuple[dict[int, dict[str, Any]], dict[str, Any], Any]:
    """(history {step: {key: value}} without W&B's own _keys, config, the run record) of RUN's one offline run."""
    folders = sorted((run / "wandb").glob("*run-*"))
    assert [f.name.startswith("offline-run-") for f in folders] == [True], folders  # offline, and only that
    (log,) = folders[0].glob("run-*.wandb")
    records = wandb_records(log)
    history = {r.history.step.num: {_key(i): json.loads(i.value_json) for i in r.history.item
                                    if not _key(i).startswith("_")} for r in records if r.HasField("history")}
    (started,) = [r.run for r in records if r.HasField("run")]
    config = {_key(i): json.loads(i.value_json) for i in started.config.update if not _key(i).startswith("_")}
    return history, config, started


def by_step(metrics: list[dict[str, Any]]) -> dict[int, dict[str, Any]]:
    """metrics.jsonl as W&B's history holds it: one row per step, an evaluation merged into its step's row."""
    merged: dict[int, dict[str, Any]] = defaultdict(dict)
    for row in metrics:
        merged[row["step"]].update(numbers(row))
    return dict(merged)


@pytest.mark.parametrize("stage", list(COMMANDS))
def test_every_stage_logs_its_metrics_to_tensorboard_and_an_offline_wandb_run(
        stage: str, tmp_path: Path, fresh_wandb: None, capfd: pytest.CaptureFixture[str]) -> None:
    run = tmp_path / "run"
    log_dir = tmp_path / "tb" if stage in EXPLICIT_DIR else run / "tensorboard"
    tensorboard = ["--tensorboard", str(log_dir)] if stage in EXPLICIT_DIR else ["--tensorboard"]
    assert main([*COMMANDS[stage](run), *tensorboard, "--wandb"]) == 0
    # run.finish() only informs W&B's core, which writes the run's file after: shutting the core down (what the
    # process's exit does for a user) waits for it
    wandb.teardown()
    console = capfd.readouterr()
    metrics = rows(run)
    assert all(any(key in row for row in metrics) for key in OWN_KEYS[stage])
    assert {row["step"] for row in metrics} >= {0, 1, 2} - ({0} if stage == "pretrain" else set())

    assert tensorboard_scalars(log_dir) == as_float32(metrics)

    history, config, started = offline_run(run)
    assert history == by_step(metrics)  # every value exactly: W&B keeps the float64 the row had
    saved = json.loads((list_checkpoints(run)[-1] / "config.json").read_text())
    assert config == {key: saved[key] for key in ("model", "train", "stage")} and config["stage"] == stage
    assert started.telemetry.feature.offline and started.display_name == "run"
    # W&B's own console lines are silenced: the one line saying where the run went is ours
    assert not [line for line in (console.out + console.err).splitlines() if line.startswith("wandb:")]
    assert f"W&B: offline run in {run / 'wandb' / 'offline-run-'}" in console.out + console.err
    assert f"TensorBoard: {log_dir}" in console.out + console.err


def test_tensorboard_hides_the_steps_a_resume_redoes_as_metrics_jsonl_drops_them(tmp_path: Path) -> None:
    """A run that died after logging steps 3-4 but before saving them resumes at 2: TensorBoard shows 3-4 once."""
    run = tmp_path / "run"
    pretrain(pretrain_config(run, max_steps=4, checkpoint_every=2, eval_every=2, tensorboard=""))
    first = tensorboard_scalars(run / "tensorboard")
    assert [step for step, _ in first["loss"]] == [1, 2, 3, 4]
    shutil.rmtree(list_checkpoints(run)[-1])  # the step-4 checkpoint was never written
    pretrain(pretrain_config(run, max_steps=4, eval_every=2, tensorboard="", resume="latest"))
    assert len(list((run / "tensorboard").iterdir())) == 2  # one event file per invocation, both read
    again = tensorboard_scalars(run / "tensorboard")
    assert again == as_float32(rows(run))
    assert [step for step, _ in again["loss"]] == [1, 2, 3, 4]


@pytest.mark.parametrize("stage", list(STAGES))
def test_every_stage_takes_tensorboard_with_or_without_a_folder_and_wandb(stage: str) -> None:
    command = command_of(stage)
    bare = parse_command_line([command, "--tensorboard", "--wandb"])
    assert (bare.tensorboard, bare.wandb) == ("", True)  # "": the run folder's tensorboard/
    given = parse_command_line([command, "--tensorboard", "logs/tb"])
    assert (given.tensorboard, given.wandb) == ("logs/tb", False)
    assert parse_command_line([command]).tensorboard is None


def test_tensorboard_as_the_on_off_flag_it_was_still_means_the_run_folder(tmp_path: Path) -> None:
    """Python callers, pipeline tables and config files that said `tensorboard = true` keep working."""
    options = tmp_path / "options.toml"
    options.write_text("tensorboard = true\n")
    from_file = parse_command_line(["train", "--config", str(options)]).tensorboard
    assert [PretrainConfig(tensorboard=value).tensorboard for value in (True, from_file, False, "false")] == [
        "", "", None, None]
