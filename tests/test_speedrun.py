"""`tinylm speedrun`: time to a dev bpb target, read off the curves, alternated against a reference run beside it."""

from __future__ import annotations

import json
import math
import statistics
from pathlib import Path

import pytest
import torch

from test_train_support import MICRO, MICRO_CLASSIC, config, data_dir, hooked_build_model, rows
from tinylm.bench import speedrun, speedrun_report
from tinylm.bench.recipes import CHANGES, RECORD, parse_recipe
from tinylm.bench.speedrun import SpeedrunOptions, applicable_pins, plan_entries, run_order
from tinylm.bench.time_to_target import median_ratio, ratio, reach
from tinylm.cli.main import main
from tinylm.errors import TinyLMError
from tinylm.stages.pretrain import PretrainStage
from tinylm.stages.pretrain import stage as pretrain_stage
from tinylm.train.loop import run_training


def _curve(*points: tuple[float, float]) -> list[dict[str, float]]:
    """Evaluations every 10 steps of 100 tokens, (train_s, dev_bpb) given."""
    return [{"train_s": t, "step": 10 * (i + 1), "tokens": 1000 * (i + 1), "dev_bpb": b}
            for i, (t, b) in enumerate(points)]


def test_reach_interpolates_between_the_evaluations_around_the_crossing() -> None:
    curve = _curve((10.0, 3.0), (20.0, 2.0), (30.0, 1.5))
    # 2.5 is half way from 3.0 to 2.0: half way in seconds, steps and tokens
    assert reach(curve, 2.5) == {"train_s": 15.0, "step": 15.0, "tokens": 1500.0}
    at = reach(curve, 1.8)  # 0.2 of the 0.5 drop from 2.0 to 1.5
    assert at is not None and math.isclose(at["train_s"], 24.0) and math.isclose(at["step"], 24.0)
    assert reach(curve, 2.0) == {"train_s": 20.0, "step": 20.0, "tokens": 2000.0}  # on the point itself
    assert reach(curve, 3.5) == {"train_s": 10.0, "step": 10.0, "tokens": 1000.0}  # below it from the start
    assert reach(curve, 1.0) is None
    # a curve that rises again: the first crossing counts, not a later one
    assert reach(_curve((10.0, 3.0), (20.0, 2.0), (30.0, 2.6), (40.0, 1.0)), 2.5)["train_s"] == 15.0


def test_ratio_and_median_count_a_target_never_reached_as_slower_than_any_time() -> None:
    fast, slow = {"train_s": 5.0}, {"train_s": 10.0}
    assert ratio(fast, slow) == 0.5
    assert ratio(None, slow) == math.inf
    assert median_ratio([0.5, 0.6, math.inf]) == 0.6
    assert median_ratio([0.5, math.inf, math.inf]) is None


def test_recipes_join_named_changes_and_fields_and_the_later_change_wins() -> None:
    recipe = parse_recipe("muon+half-batch+lr=0.006+qk_norm=true+batch_size=4")
    assert recipe.changes == {"optimizer": "muon", "batch_size": 4, "lr": 0.006, "overrides": {"qk_norm": True}}
    assert recipe.config_changes({"n_blocks": 1}) == {"optimizer": "muon", "batch_size": 4, "lr": 0.006,
                                                      "overrides": {"n_blocks": 1, "qk_norm": True}}
    assert parse_recipe("default").changes == {}
    assert parse_recipe("record").changes == parse_recipe(RECORD).changes
    assert parse_recipe("record+qknorm").changes == parse_recipe(f"{RECORD}+qknorm").changes
    assert parse_recipe("lr=0.1+record").changes["lr"] == 0.06 and parse_recipe("record+lr=0.1").changes["lr"] == 0.1
    old_default = {"optimizer": "adamw", "lr": 3e-3, "muon_momentum": 0.95, "seq_len_warmup_steps": 0}
    assert parse_recipe("adamw-default").changes == old_default
    assert parse_recipe("nanogpt").changes == {**old_default, "arch": "classic"}
    for name in CHANGES:  # every named change is a valid PretrainConfig change
        config(None, **parse_recipe(name).config_changes(dict(MICRO))).model_config()


@pytest.mark.parametrize(("spec", "says"), [
    ("warp", "unknown change 'warp'"),
    ("muon++wsd", "joined by '+'"),
    ("lr=fast", "lr expects float, got 'fast'"),
    ("qk_norm=maybe", "qk_norm expects true/false"),
    ("max_steps=5", "max_steps is the speedrun's to set"),
    ("flux=3", "'flux' is neither a training option nor a model field"),
])
def test_a_bad_recipe_is_one_line_naming_the_part(spec: str, says: str) -> None:
    with pytest.raises(TinyLMError, match=f"recipe '{spec}'.*{says}".replace("(", r"\(").replace("+", r"\+")):
        parse_recipe(spec)


def test_every_run_gets_the_reference_tokens_and_evaluates_at_the_same_tokens() -> None:
    # against the default itself, so that each recipe differs from the reference by exactly its own changes
    # 600 steps, the race the recipes were made for: no warmup is shortened, so each differs by its changes alone
    opts = SpeedrunOptions(recipes=["wsd", "half-batch", "double-batch"], against="default", steps=600, eval_every=4,
                           train={"data": str(data_dir()), "overrides": dict(MICRO)})
    entries, budget = plan_entries(opts)
    assert budget == 600 * 16 * 32
    assert [e.name for e in entries] == ["reference: default", "wsd", "half-batch", "double-batch"]
    ref = entries[0].config
    for entry in entries:
        cfg = entry.config
        assert cfg.max_tokens == budget and cfg.eval_every * cfg.batch_size * 32 == 4 * 16 * 32
        assert cfg.log_every == cfg.eval_every  # every evaluation has its step's training seconds
        assert cfg.eval_batch_size == 16  # the reference's dev rows, in its batches, for every run
        changed = {k for k, v in cfg.to_dict().items() if v != ref.to_dict()[k]} - {"eval_every", "log_every"}
        assert changed == set(entry.recipe.changes) - {"overrides"}
    assert [e.name for e in run_order(entries, 1)] == ["double-batch", "half-batch", "wsd", "reference: default"]
    with pytest.raises(TinyLMError, match="rows of 16 tokens and the reference on 32"):
        plan_entries(SpeedrunOptions(recipes=["seq_len=16"], train={"data": str(data_dir()), "overrides": dict(MICRO)}))
    with pytest.raises(TinyLMError, match="listed twice"):
        plan_entries(SpeedrunOptions(recipes=["muon", "muon"], train={"data": str(data_dir())}))
    with pytest.raises(TinyLMError, match="recipe 'n_head=3'"):  # a model the preset cannot build, before training
        plan_entries(SpeedrunOptions(recipes=["n_head=3"], train={"data": str(data_dir()), "overrides": dict(MICRO)}))


def test_a_given_compile_setting_and_the_warmup_changes_reach_every_run(capsys: pytest.CaptureFixture[str]) -> None:
    """--compile off holds for every run (a pinned reference choice only fills what is left on auto); the
    batch ramp, the sequence warmup and the weight-decay schedule are recipe changes like any other."""
    entries, budget = plan_entries(SpeedrunOptions(recipes=["batch-ramp", "seq-warmup", "wd-linear"], steps=600,
                                                   train={"data": str(data_dir()), "overrides": dict(MICRO),
                                                          "compile": "off"}))
    assert {entry.config.compile for entry in entries} == {"off"}
    assert "compile" not in applicable_pins({"compile": "on", "dtype": "bf16"}, entries[1].config)
    ramp, warm, decay = (entry.config for entry in entries[1:])
    assert ramp.batch_ramp_steps == 100 and warm.seq_len_warmup_steps == 150
    assert decay.weight_decay_schedule == "linear" and ramp.max_tokens == budget
    assert main(["speedrun", "--compile", "sometimes"]) == 2
    assert "argument --compile" in capsys.readouterr().err



def test_a_short_race_shortens_every_warmup_to_a_quarter_of_its_run() -> None:
    """--steps 30 would race the record on 64-token rows throughout (its sequence warmup is 150 steps): every warmup
    is cut to a quarter of its own run's steps, and the line that says so names each cut."""
    train = {"data": str(data_dir()), "overrides": dict(MICRO)}
    entries, _ = plan_entries(SpeedrunOptions(recipes=["record", "half-batch", "batch-ramp"], steps=30, train=train))
    reference, record, half, ramp = (entry.config for entry in entries)
    assert reference.warmup_steps == record.warmup_steps == ramp.warmup_steps == 7
    assert record.seq_len_warmup_steps == 7 and ramp.batch_ramp_steps == 7
    assert half.warmup_steps == 15  # 60 steps of half the batch
    assert speedrun.shortened_line(entries, 30) == (
        "a 30-step race: each warmup is at most a quarter of its run's steps, so reference: adamw-default: lr "
        "warmup 20 -> 7 steps; record: lr warmup 20 -> 7 steps, sequence warmup 150 -> 7 steps; half-batch: lr "
        "warmup 20 -> 15 steps; batch-ramp: lr warmup 20 -> 7 steps, batch ramp 100 -> 7 steps")
    entries, _ = plan_entries(SpeedrunOptions(recipes=["record"], train=train))  # the race the recipes were made for
    assert entries[1].config.seq_len_warmup_steps == 150 and entries[1].config.warmup_steps == 20
    assert speedrun.shortened_line(entries, 600) == ""


def test_the_plot_shows_every_curve_and_the_target(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A 30-step race evaluated 3 times: the reference ends at the target, the record far below it."""
    def run(recipe: str, *bpbs: float) -> dict:
        return {"recipe": recipe, "target_bpb": 2.9649, "curve": _curve(*((10.0 * (i + 1), b) for i, b in
                                                                          enumerate(bpbs)))}
    result = {"preset": "tiny", "reference": "adamw-default",
              "rows": [{"recipe": "reference: adamw-default", "spec": "adamw-default"}, {"recipe": "record",
                                                                                      "spec": "record"}],
              "runs": [run("reference: adamw-default", 3.4, 3.0, 2.9649), run("record", 2.9, 2.5, 2.2718)]}
    drawn = {}

    def keep(fig: object, path: Path) -> Path:
        drawn["ylim"] = fig.axes[0].get_ylim()  # type: ignore[attr-defined]
        return path

    monkeypatch.setattr(speedrun_report, "save_figure", keep)
    speedrun_report.plot_curves(result, tmp_path / "speedrun.png")
    low, high = drawn["ylim"]
    assert low < 2.2718 and high > 3.0  # both curves from their second evaluation, and the target between
    assert high - low < 1.0  # the first evaluation (3.4) does not flatten the rest


def test_an_out_holding_a_speedrun_is_refused_unless_overwrite(tmp_path: Path,
                                                              capsys: pytest.CaptureFixture[str]) -> None:
    out = tmp_path / "race"
    out.mkdir()
    (out / "speedrun.json").write_text("{}")
    race = ["speedrun", "--recipe", "record", "--seeds", "1", "--steps", "4", "--eval-every", "2",
            "--eval-batches", "1", "--data", str(data_dir()), "--threads", "1", "--out", str(out),
            *[f"--set={k}={v}" for k, v in MICRO.items()]]
    assert main(race) == 1
    assert (f"--out {out} holds a speedrun already (speedrun.json): choose another --out, or pass --overwrite"
            in capsys.readouterr().err)
    assert sorted(p.name for p in out.iterdir()) == ["speedrun.json"]  # refused before any training
    assert main([*race, "--overwrite"]) == 0
    err = capsys.readouterr().err
    assert "speedrun: a 4-step race: each warmup is at most a quarter of its run's steps, so " in err
    assert json.loads((out / "speedrun.json").read_text())["warmups_shortened"] in (out / "speedrun.md").read_text()


def test_ctrl_c_stops_the_speedrun_and_says_it_does_not_resume(tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                                               capsys: pytest.CaptureFixture[str]) -> None:
    import os
    import signal

    def interrupt(module: torch.nn.Module, args: object, output: object) -> None:
        if module.training:
            os.kill(os.getpid(), signal.SIGINT)  # a real Ctrl-C, mid-step

    monkeypatch.setattr(pretrain_stage, "build_model", hooked_build_model(interrupt))
    out = tmp_path / "race"
    assert main(["speedrun", "--recipe", "record", "--seeds", "1", "--steps", "4", "--eval-every", "2",
                 "--eval-batches", "1", "--data", str(data_dir()), "--threads", "1", "--out", str(out),
                 *[f"--set={k}={v}" for k, v in MICRO.items()]]) == 1
    err = capsys.readouterr().err
    assert "stopped at step 1: interrupted\n" in err and "--resume" not in err
    assert ("speedrun stopped: reference: adamw-default (seed 1) was interrupted at step 1; a speedrun does not "
            "resume, so no results were written: run it again to race from the start") in err
    assert not (out / "speedrun.json").exists()


def test_train_s_counts_the_steps_not_the_evaluations_and_continues_on_resume(tmp_path: Path) -> None:
    run_training(config(tmp_path, max_steps=3, eval_every=1, checkpoint_every=3), stage=PretrainStage())
    first = [r for r in rows(tmp_path) if "train_s" in r]
    assert [r["step"] for r in first] == [1, 2, 3]
    assert all(a["train_s"] < b["train_s"] for a, b in zip(first, first[1:]))
    assert first[-1]["train_s"] < first[-1]["elapsed_s"]  # the evaluations between the steps are not counted
    run_training(config(tmp_path, max_steps=5, eval_every=1, resume="latest"), stage=PretrainStage())
    resumed = [r for r in rows(tmp_path) if "train_s" in r]
    assert [r["step"] for r in resumed] == [1, 2, 3, 4, 5]
    assert resumed[3]["train_s"] > first[-1]["train_s"]


def _seconds_to(curve: list[dict], target: float) -> float:
    """Recomputed here: the first evaluation at or below the target, interpolated from the one before it."""
    i = next(i for i, p in enumerate(curve) if p["dev_bpb"] <= target)
    if i == 0:
        return curve[0]["train_s"]
    a, b = curve[i - 1], curve[i]
    return a["train_s"] + (a["dev_bpb"] - target) / (a["dev_bpb"] - b["dev_bpb"]) * (b["train_s"] - a["train_s"])


def test_speedrun_end_to_end_alternates_pins_the_choices_and_reports_the_median_ratio(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    out = tmp_path / "race"
    code = main(["speedrun", "--recipe", "muon,half-batch", "--seeds", "1,2", "--steps", "8", "--eval-every", "2",
                 "--eval-batches", "2", "--data", str(data_dir()), "--threads", "1", "--out", str(out),
                 *[f"--set={k}={v}" for k, v in MICRO.items()]])
    assert code == 0
    table = capsys.readouterr().out
    assert "| `adamw-default` (reference) |" in table and "| `half-batch` |" in table
    result = json.loads((out / "speedrun.json").read_text())
    assert (out / "speedrun.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    assert (out / "speedrun.md").read_text() == table.rstrip("\n") + "\n"
    runs = result["runs"]
    # seed 1: reference first; seed 2: reversed
    assert [(r["recipe"], r["seed"]) for r in runs] == [
        ("reference: adamw-default", 1), ("muon", 1), ("half-batch", 1),
        ("half-batch", 2), ("muon", 2), ("reference: adamw-default", 2)]
    assert len({json.dumps(r["choices"], sort_keys=True) for r in runs}) == 1  # one dtype, kernel, compile for all
    assert {r["summary"]["tokens"] for r in runs} == {8 * 16 * 32}
    assert [r["summary"]["steps"] for r in runs] == [8, 8, 16, 16, 8, 8]
    for run in runs:
        ref = next(r for r in runs if r["seed"] == run["seed"] and r["recipe"].startswith("reference"))
        target = ref["summary"]["dev_bpb"]
        assert run["target_bpb"] == target
        assert run["curve"][-1]["dev_bpb"] == run["summary"]["dev_bpb"]  # the last evaluation is the end
        if run["ratio"] is not None:
            expected = _seconds_to(run["curve"], target) / _seconds_to(ref["curve"], target)
            assert math.isclose(run["ratio"], expected, rel_tol=1e-9)
        else:
            assert min(p["dev_bpb"] for p in run["curve"]) > target
    rows_by = {row["recipe"]: row for row in result["rows"]}
    assert rows_by["reference: adamw-default"]["ratios"] == [1.0, 1.0]
    muon = [r["ratio"] if r["ratio"] is not None else math.inf for r in runs if r["recipe"] == "muon"]
    expected = statistics.median(muon)
    assert result["time_to_target_ratio"] == (None if math.isinf(expected) else expected)


def test_the_attention_kernel_is_pinned_only_where_the_model_has_a_choice() -> None:
    entries, _ = plan_entries(SpeedrunOptions(recipes=["nanogpt", "muon", "dtype=fp32"]))
    reference, nanogpt, muon, fp32 = (entry.config for entry in entries)
    pins = {"dtype": "bf16", "attention": "blockwise", "compile": "off"}
    assert applicable_pins(pins, reference) == applicable_pins(pins, muon) == pins
    assert applicable_pins(pins, nanogpt) == {"dtype": "bf16", "compile": "off"}  # the classic model's own attention
    assert applicable_pins(pins, fp32) == {"attention": "blockwise", "compile": "off"}  # its own dtype stays


def test_a_nanogpt_row_races_beside_a_modern_reference_whose_kernel_is_pinned(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """The kernel the reference chose (blockwise here) is kept for the modern runs and never given to nanogpt."""
    real = speedrun.pinned_choices

    def blockwise_for_the_modern_model(checkpoint: str | None) -> dict[str, str]:
        choices = real(checkpoint)
        arch = json.loads((Path(checkpoint) / "config.json").read_text())["model"]["arch"]
        return {**choices, "attention": "blockwise"} if arch == "modern" else choices

    monkeypatch.setattr(speedrun, "pinned_choices", blockwise_for_the_modern_model)
    out = tmp_path / "race"
    assert main(["speedrun", "--recipe", "nanogpt,muon", "--seeds", "1,2", "--steps", "4", "--eval-every", "2",
                 "--eval-batches", "1", "--data", str(data_dir()), "--threads", "1", "--out", str(out),
                 *[f"--set={k}={v}" for k, v in MICRO_CLASSIC.items()]]) == 0
    runs = json.loads((out / "speedrun.json").read_text())["runs"]
    assert [(r["recipe"], r["seed"]) for r in runs] == [
        ("reference: adamw-default", 1), ("nanogpt", 1), ("muon", 1), ("muon", 2), ("nanogpt", 2),
        ("reference: adamw-default", 2)]
    for run in runs[1:]:  # the first run chose for itself; every later modern run took its (patched) choice
        recorded = json.loads((Path(run["summary"]["checkpoint"]) / "config.json").read_text())
        attention = recorded["run_choices"]["attention"]
        if run["recipe"] == "nanogpt":
            assert attention["value"] == "sdpa" and "the model's own" in attention["reason"]
        else:
            assert attention["value"] == "blockwise" and "--attention blockwise" in attention["reason"], run["recipe"]


def test_speedrun_refusals_are_one_line(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["speedrun", "--recipe", "warp", "--out", str(tmp_path)]) != 0
    assert "unknown change 'warp'" in capsys.readouterr().err
    assert main(["speedrun", "--target-bpb", "0"]) == 2
    assert "argument --target-bpb" in capsys.readouterr().err
    assert not list(tmp_path.iterdir())  # refused before anything was written


def test_eval_batch_size_scores_runs_with_different_batches_on_the_same_dev_rows(tmp_path: Path) -> None:
    seen = []
    for batch in (2, 4):
        stage = PretrainStage()
        run_training(config(tmp_path / f"b{batch}", batch_size=batch, eval_batch_size=4, max_steps=1), stage=stage)
        seen.append(torch.cat([x for x, _ in stage.dev_batches]))
    assert seen[0].shape[0] == 4 * 4 and torch.equal(seen[0], seen[1])  # eval_batches=4 batches of 4 rows each
    stage = PretrainStage()
    run_training(config(tmp_path / "plain", batch_size=2, max_steps=1), stage=stage)
    assert stage.dev_batches[0][0].shape[0] == 2  # unset: the training batch, as before


def test_target_dev_bpb_stops_at_the_first_evaluation_that_reaches_it(tmp_path: Path) -> None:
    summary = run_training(config(tmp_path / "far", max_steps=8, eval_every=2, target_dev_bpb=1e-3),
                           stage=PretrainStage())
    assert summary.stopped == "max_steps" and summary.steps == 8  # never reached: the budget ends it
    evaluated = [r["dev_bpb"] for r in rows(tmp_path / "far") if "dev_bpb" in r]
    target = evaluated[1]  # reached at the second evaluation (step 4), or earlier if the first was lower already
    first = next(2 * (i + 1) for i, bpb in enumerate(evaluated) if bpb <= target)
    summary = run_training(config(tmp_path / "near", max_steps=8, eval_every=2, target_dev_bpb=target),
                           stage=PretrainStage())
    assert summary.stopped == "target" and summary.steps == first and summary.checkpoint is not None
    assert json.loads((tmp_path / "near" / "status.json").read_text())["status"] == "finished"
    with pytest.raises(TinyLMError, match="--stop-at-target needs --target-bpb"):
        plan_entries(SpeedrunOptions(stop_at_target=True, train={"data": str(data_dir())}))
