"""The seam between the engine and a stage: a stage is one row of the table plus its own package.

A test-only stage (one option, a trivial loss) is added to the table here and nowhere else; the command
line, its --help, the studio's form and resume (from the command line and from Python) all pick it up.
And the engine's config holds only what the engine reads: an option field read by nothing fails here.
"""

from __future__ import annotations

import ast
import dataclasses
import json
from dataclasses import dataclass
from pathlib import Path

import pytest
import torch
from torch import nn

from tinylm.cli.main import main
from tinylm.config import ModelConfig
from tinylm.models.factory import build_model
from tinylm.options import Option, option_specs
from tinylm.stages import STAGES, StageSpec
from tinylm.studio import data_preview, launch
from tinylm.train.config import EngineConfig
from tinylm.train.loop import run_training
from tinylm.train.stage import Stage, StageLoss

SRC = Path(__file__).resolve().parents[1] / "src" / "tinylm"


@dataclass
class CountConfig(EngineConfig):
    """One option of its own: the period of the sequence it learns to continue."""

    period: int = Option("the sequence 0, 1, ..., PERIOD-1, 0, 1, ... the model learns to continue", low=2,
                         high=16)(7)
    # pinned: nothing to measure for a model this small
    dtype: str = "fp32"
    compile: str = "off"
    attention: str = "sdpa"
    max_steps: int = 4
    eval_every: int = 0
    progress: bool = False
    optimizer: str = "adamw"


class CountStage(Stage[CountConfig]):
    """Next-token cross-entropy on a periodic sequence: the smallest stage that trains a real model."""

    name = "count"
    constant_weight = True

    def setup(self, ctx) -> None:  # type: ignore[no-untyped-def]
        super().setup(ctx)
        self.mcfg = ModelConfig(arch="modern", vocab_size=16, context_length=8, n_embed=16, n_head=2, n_kv_head=2,
                                n_blocks=1)
        self.batches = 0

    def model_config(self) -> ModelConfig:
        return self.mcfg

    def build_model(self) -> nn.Module:
        torch.manual_seed(self.ctx.cfg.seed)
        return build_model(self.mcfg)

    def next_batch(self):  # type: ignore[no-untyped-def]
        self.batches += 1
        rows = [[(start + i) % self.ctx.cfg.period for i in range(9)] for start in range(self.ctx.cfg.batch_size)]
        ids = torch.tensor(rows)
        return ids[:, :-1], ids[:, 1:]

    def batch_weight(self, batch) -> int:  # type: ignore[no-untyped-def]
        return batch[1].numel()

    def loss(self, model: nn.Module, batch) -> StageLoss:  # type: ignore[no-untyped-def]
        _, loss = model(*batch, return_logits=False)
        return StageLoss(loss * batch[1].numel(), {})

    def state_dict(self) -> dict:
        return {"batches": self.batches}

    def load_state_dict(self, state: dict) -> None:
        self.batches = state["batches"]


@pytest.fixture
def count_row(monkeypatch: pytest.MonkeyPatch) -> StageSpec:
    spec = StageSpec("count", "learn to count (a test-only stage)", CountConfig, CountStage)
    monkeypatch.setitem(STAGES, "count", spec)
    return spec


def _steps(run: Path) -> list[int]:
    rows = [json.loads(line) for line in (run / "metrics.jsonl").read_text().splitlines()]
    return [row["step"] for row in rows if "loss" in row]


def test_a_new_row_is_a_command_with_help_a_form_and_resume(count_row: StageSpec, tmp_path: Path,
                                                            capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit):
        main(["count", "--help"])
    text = capsys.readouterr().out
    assert "--period" in text and "learns to continue" in text
    assert "--eval-batches" not in text and "--preset" not in text  # pretraining's own options are not the engine's

    run = tmp_path / "run"
    assert main(["count", "--out", str(run), "--period", "5", "--max-steps", "3", "--log-every", "1"]) == 0
    assert _steps(run) == [1, 2, 3]
    saved = json.loads(next((run / "checkpoints").iterdir()).joinpath("config.json").read_text())
    assert saved["train"]["period"] == 5

    # the command line resumes with the run's own options (period 5, not the default 7)
    capsys.readouterr()
    assert main(["count", "--out", str(run), "--resume", "latest", "--max-steps", "5", "--log-every", "1"]) == 0
    assert "period=5" in capsys.readouterr().err
    assert _steps(run) == [1, 2, 3, 4, 5]

    # and so does a Python caller, by the same rule
    summary = run_training(CountConfig(out=str(run), resume="latest", max_steps=6, log_every=1), stage=CountStage())
    assert summary.steps == 6 and _steps(run) == [1, 2, 3, 4, 5, 6]
    resumed = json.loads(sorted((run / "checkpoints").iterdir())[-1].joinpath("config.json").read_text())
    assert resumed["train"]["period"] == 5

    # the studio's form has its one option, checked as the command line checks it
    form = next(f for f in launch.stage_forms() if f["stage"] == "count")
    assert [f["name"] for f in form["fields"] if f["name"] == "period"] == ["period"]
    assert launch.command_line("count", {"period": 3}, tmp_path / "x")[-2:] == ["--period", "3"]
    with pytest.raises(launch.StudioError, match="--period must be <= 16"):
        launch.command_line("count", {"period": 99}, tmp_path / "x")
    # a row without a data preview is a 4xx naming it, never a server error
    with pytest.raises(launch.StudioError, match="the count stage has no data preview") as refused:
        data_preview.preview(tmp_path, "count", "builtin:arith", None)
    assert refused.value.status == 404


def test_a_resume_with_nothing_to_continue_and_no_base_is_one_line(tmp_path: Path,
                                                                   capsys: pytest.CaptureFixture[str]) -> None:
    code = main(["sft", "--resume", "latest", "--out", str(tmp_path / "none")])
    assert code == 1
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "no --base was given" in err[0]
    assert not (tmp_path / "none").exists()  # refused before a run folder is made


# ---- every option field is read by the room that declares it ---------------------------------------------
def _attributes_read(folder: Path) -> set[str]:
    names: set[str] = set()
    for path in folder.rglob("*.py"):
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if isinstance(node, ast.Attribute) and isinstance(node.ctx, ast.Load):
                names.add(node.attr)
            elif isinstance(node, ast.Constant) and isinstance(node.value, str):  # getattr(cfg, "name")
                names.add(node.value)
    return names


def _config_classes() -> list[type]:
    seen: list[type] = []
    for spec in STAGES.values():
        for klass in spec.config.__mro__:
            if dataclasses.is_dataclass(klass) and klass not in seen and klass is not object:
                seen.append(klass)
    return seen


def test_every_option_field_is_read_by_the_room_that_declares_it() -> None:
    """An option declared on the engine's config must be read by the engine (train/); one declared on a stage's
    config by that stage's package: so no stage inherits an option nothing of its own reads (the old
    `tinylm sft --eval-batches`, which only pretraining read)."""
    unread = []
    for klass in _config_classes():
        module = Path(__import__(klass.__module__, fromlist=["_"]).__file__)
        room = module.parent
        read = _attributes_read(room)
        declared = set(vars(klass).get("__annotations__", {}))
        for spec in option_specs(klass):
            if spec.name in declared and "option" in klass.__dataclass_fields__[spec.name].metadata \
                    and spec.name not in read:
                unread.append(f"{klass.__name__}.{spec.name} (nothing under {room.relative_to(SRC)} reads it)")
    assert not unread, unread


def test_the_check_fails_on_an_option_nothing_reads() -> None:
    """The check above can fail: an engine option that train/ never reads is caught."""
    read = _attributes_read(SRC / "train")
    assert "eval_batches" not in read and "target_dev_bpb" not in read and "sample_tokens" not in read
    assert "eval_batches" not in {spec.name for spec in option_specs(EngineConfig)}
    assert all(spec.name in read for spec in option_specs(EngineConfig))


# ---- no stage name is switched on outside the table ---------------------------------------------------------
def _switches_on_stage_names(path: Path) -> list[str]:
    """A comparison with a stage's name, or a lookup by one (`STAGES["rl"]`, `{...}[stage]` aside): the pipeline's
    own slot tables (its [pretrain] defaults) name slots, not stages, and are not switches."""
    names = set(STAGES) - {"count"}
    found = []
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if isinstance(node, ast.Compare):
            for part in [node.left, *node.comparators]:
                if isinstance(part, ast.Constant) and part.value in names:
                    found.append(f"{path.relative_to(SRC)}:{node.lineno} compares with {part.value!r}")
        if isinstance(node, ast.Subscript) and isinstance(node.slice, ast.Constant) and node.slice.value in names:
            found.append(f"{path.relative_to(SRC)}:{node.lineno} looks up [{node.slice.value!r}]")
    return found


@pytest.mark.parametrize("room", ["train", "evaluate", "pipeline", "studio"])
def test_no_stage_name_is_switched_on_outside_the_table(room: str) -> None:
    found = [line for path in sorted((SRC / room).rglob("*.py")) for line in _switches_on_stage_names(path)]
    assert not found, found
