"""The runs index the studio shows: real runs (finished, failed, killed, a pipeline's lineage), read from disk."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest

from test_train_support import cli_args
from tinylm.cli.main import main
from tinylm.studio.runs import StudioError, best_evaluation, list_runs, resolve_run, sparkline

pytestmark = pytest.mark.usefixtures("one_thread")


@pytest.fixture(scope="module")
def root(tmp_path_factory: pytest.TempPathFactory) -> Path:
    root = tmp_path_factory.mktemp("runs")
    assert main(cli_args(root / "a", "--max-steps", "4", "--eval-every", "2")) == 0
    assert main(cli_args(root / "group" / "b", "--max-steps", "2")) == 0
    return root


def test_every_run_under_the_root_is_listed_with_what_its_files_say(root: Path) -> None:
    records = {r["name"]: r for r in list_runs(root)}
    assert set(records) == {"a", "group/b"}  # nested folders too; the group itself is not a run
    a = records["a"]
    assert (a["stage"], a["status"], a["step"], a["total_steps"]) == ("pretrain", "finished", 4, 4)
    assert a["best"]["name"] == "dev_bpb" and a["best"]["step"] in (2, 4)
    assert a["sparkline"][0] == [1, 2, 3, 4] and len(a["sparkline"][1]) == 4
    assert a["checkpoints"] == ["step_00000004"] and a["duration_s"] > 0 and a["parent"] is None


def test_a_damaged_metrics_line_is_counted_not_fatal(root: Path, tmp_path: Path) -> None:
    import shutil

    copy = tmp_path / "copy"
    shutil.copytree(root / "a", copy / "a")
    with (copy / "a" / "metrics.jsonl").open("a") as f:
        f.write("not json\n{\"step\": 9, \"loss\": 1.0}\n")
    (record,) = list_runs(copy)
    assert record["step"] == 9 and len(record["notes"]) == 1 and "line" in record["notes"][0]


def test_lineage_names_the_run_a_stage_started_from(tmp_path: Path) -> None:
    """An SFT run's checkpoint says which checkpoint it started from: the parent, when it is under the root."""
    from test_sft import SFTStage, sft_config
    from tinylm.train.loop import run_training

    cfg = sft_config(tmp_path / "probe", max_steps=1)
    base_run = Path(cfg.base)  # the pretrained run every SFT test starts from
    base_run = base_run.parent.parent if base_run.parent.name == "checkpoints" else base_run
    child = base_run.parent / f"sft-child-{tmp_path.name}"
    run_training(cfg.replace(out=str(child), max_steps=2), stage=SFTStage())
    records = {r["name"]: r for r in list_runs(base_run.parent)}
    assert records[child.name]["parent"] == base_run.name and records[child.name]["stage"] == "sft"
    assert records[base_run.name]["parent"] is None
    run_training(cfg.replace(out=str(tmp_path / "alone"), max_steps=1), stage=SFTStage())
    alone = {r["name"]: r for r in list_runs(tmp_path)}["alone"]
    assert alone["parent"] is None  # its base is not under this root


def test_lineage_holds_from_any_working_folder(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A run started with a relative --base (as the studio's form writes it) keeps its parent when the studio runs
    from another folder (`cd /tmp && tinylm studio --runs DIR` showed no parent for any run)."""
    from test_sft import SFTStage, sft_config
    from tinylm.train.loop import run_training

    cfg = sft_config(tmp_path / "probe", max_steps=1)
    base = Path(cfg.base)
    base_run = base.parent.parent if base.parent.name == "checkpoints" else base
    root = tmp_path / "root"
    shutil.copytree(base_run, root / "base")
    monkeypatch.chdir(root)
    run_training(cfg.replace(base="base", out="child", max_steps=1), stage=SFTStage())
    monkeypatch.chdir(tmp_path)
    assert {r["name"]: r for r in list_runs(root)}["child"]["parent"] == "base"


def test_folders_a_run_writes_inside_itself_are_not_runs(root: Path, tmp_path: Path) -> None:
    """RL's RUN/rollout-weights/ and LoRA's RUN/merged/ hold checkpoints only: they were listed as runs of their own
    ("saved", no lineage). A folder of checkpoints that no run folder holds (`tinylm import`) still is a run."""
    shutil.copytree(root / "a", tmp_path / "rl")
    shutil.copytree(root / "a" / "checkpoints", tmp_path / "rl" / "rollout-weights" / "checkpoints")
    shutil.copytree(root / "a", tmp_path / "lora")
    shutil.copytree(root / "a" / "checkpoints", tmp_path / "lora" / "merged" / "checkpoints")
    shutil.copytree(root / "a" / "checkpoints", tmp_path / "imported" / "checkpoints")
    shutil.copytree(root / "a", tmp_path / "pipeline" / "sft")  # a pipeline's stages are runs inside its folder
    shutil.copytree(root / "a", tmp_path / "rl" / "nested")  # a stage's files: a run wherever it is
    assert [r["name"] for r in list_runs(tmp_path)] == ["imported", "lora", "pipeline/sft", "rl", "rl/nested"]
    for name in ("rl/rollout-weights", "lora/merged"):
        with pytest.raises(StudioError):
            resolve_run(tmp_path, name)
    assert resolve_run(tmp_path, "imported") == (tmp_path / "imported").resolve()


@pytest.mark.parametrize("name", ["..", "../x", "/etc", "a/../../x", "", "a\\b", "nope", "group"])
def test_names_outside_the_root_or_not_runs_are_refused(root: Path, name: str) -> None:
    with pytest.raises(StudioError) as refused:
        resolve_run(root, name)
    assert refused.value.status == 404


def test_a_link_out_of_the_root_is_refused(root: Path, tmp_path: Path) -> None:
    (root / "escape").symlink_to(tmp_path)
    try:
        (tmp_path / "metrics.jsonl").write_text("")
        with pytest.raises(StudioError):
            resolve_run(root, "escape")
        assert "escape" not in {r["name"] for r in list_runs(root)}  # links are not followed either
    finally:
        (root / "escape").unlink()


def test_best_and_sparkline_rules() -> None:
    rows = [{"step": s, "loss": 10.0 - s} for s in range(1, 201)] + [
        {"step": 50, "exact_match": 0.2}, {"step": 100, "exact_match": 0.6}, {"step": 150, "exact_match": 0.4},
        {"step": 100, "dev_bpb": 1.5}]
    assert best_evaluation(rows) == {"name": "exact_match", "value": 0.6, "step": 100}  # higher is better
    assert best_evaluation([{"step": 1, "dev_bpb": 2.0}, {"step": 2, "dev_bpb": 1.8}])["value"] == 1.8
    steps, losses = sparkline(rows)
    assert len(steps) == 64 and steps[0] == 1 and steps[-1] == 200 and losses[-1] == -190.0
