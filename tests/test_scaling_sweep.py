"""The depth dial, a budget turned into steps (FLOPs counted as the report counts them), and a real sweep on the
test data: points written, resumed without retraining, its folder guarded, the prediction written first."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from test_train_support import VOCAB, data_dir
from tinylm.cli.main import main
from tinylm.depth import DepthRule
from tinylm.errors import TinyLMError
from tinylm.models.factory import build_model
from tinylm.presets import preset_config
from tinylm.scaling import budget as budget_module
from tinylm.scaling import sweep as sweep_module
from tinylm.scaling.budget import budget_run, run_flops, run_plan
from tinylm.scaling.fit import fit_points
from tinylm.scaling.points import read_points
from tinylm.scaling.predict import PREDICTION, next_budget, plan_prediction, run_prediction
from tinylm.scaling.sweep import POINTS, ScalingOptions, plan_sweep, run_sweep
from tinylm.stages.pretrain.config import PretrainConfig


def test_depth_four_is_the_tiny_preset_and_the_record_recipe() -> None:
    rule = DepthRule(4)
    assert rule.model_config() == preset_config("tiny")
    assert rule.model_config("classic") == preset_config("tiny", "classic")
    assert (rule.adamw_lr, rule.muon_lr, rule.batch_size) == (0.06, 0.02, 16)  # the record's, tinylm train's
    default, dialled = PretrainConfig(), PretrainConfig(depth=4)
    assert dialled.model_config() == default.model_config()
    assert (dialled.adamw_lr, dialled.muon_lr, dialled.batch_size) == (default.adamw_lr, default.muon_lr, 16)
    for preset in ("student", "small"):  # not on the rule: the docs say so
        assert all(DepthRule(d).model_config() != preset_config(preset) for d in range(1, 13))


@pytest.mark.parametrize("depth", [1, 2, 3, 5, 6, 8])
def test_the_rule_at_each_depth(depth: int) -> None:
    rule = DepthRule(depth)
    config = rule.model_config()
    assert (config.n_blocks, config.n_embed, config.dim_per_head, config.context_length) == (depth, 32 * depth, 32,
                                                                                            256)
    assert config.n_head % config.kv_heads == 0 and config.kv_heads in (config.n_head, config.n_head // 2)
    assert rule.adamw_lr == pytest.approx(0.06 * (128 / (32 * depth)) ** 0.5)
    assert rule.batch_size == 4 * depth
    cfg = PretrainConfig(depth=depth)
    assert cfg.batch_size == 4 * depth and cfg.adamw_lr == pytest.approx(rule.adamw_lr)
    given = PretrainConfig(depth=depth, lr=0.01, batch_size=3, muon_lr=0.05)  # what is given beside it wins
    assert (given.adamw_lr, given.batch_size, given.muon_lr) == (0.01, 3, 0.05)
    assert PretrainConfig(depth=depth, optimizer="adamw").adamw_lr == 3e-3  # the rule's rate is Muon's recipe


def test_depth_out_of_range_is_one_line(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["train", "--depth", "0", "--max-steps", "1"]) == 1
    assert "--depth must be in [1, 64] (got 0)" in capsys.readouterr().err


def closed_form_flops(depth: int, plan_rows: list[tuple[int, int]], vocab: int = 4096) -> tuple[int, int]:
    """6ND plus 6 x blocks x row length x heads x 2 x head dim per token, from the shape alone."""
    width, blocks = 32 * depth, depth
    heads, kv = depth, depth // 2 if depth % 2 == 0 else depth
    hidden = ((8 * width // 3) + 63) // 64 * 64  # SwiGLU's 8/3 width, up to a multiple of 64
    norms = (2 * blocks + 1) * width  # RMSNorm gains count in N too, as models/accounting.py counts them
    n = blocks * (width * width * 2 + 2 * width * kv * 32 + 3 * width * hidden) + vocab * width + norms
    tokens = sum(rows * length for rows, length in plan_rows)
    attention = sum(rows * length * 6 * blocks * length * heads * 64 for rows, length in plan_rows)
    return tokens, 6 * n * tokens + attention


@pytest.mark.parametrize("depth", [1, 2, 4, 6])
def test_a_runs_flops_are_6nd_plus_attention(depth: int) -> None:
    rule = DepthRule(depth)
    steps = 200
    plan = run_plan(rule, steps)
    assert plan.seq_warmup_steps == 50  # the record's sequence warmup: a quarter of the run
    tokens, flops = run_flops(rule.model_config(), plan, steps)
    assert (tokens, flops) == closed_form_flops(depth, [plan.shape(s) for s in range(steps)])
    model = build_model(rule.model_config())
    assert flops == sum(r * length * model.flops_per_token(length) for r, length in
                        (plan.shape(s) for s in range(steps)))  # the figure the run's MFU is computed from


@pytest.mark.parametrize("budget", [1e12, 3.16e12, 1e13, 3.16e13])
def test_every_run_of_the_default_grid_spends_its_budget_within_two_percent(budget: float) -> None:
    for run in plan_sweep(ScalingOptions(budgets=[budget], depths=[1, 2, 3, 4, 5, 6])):
        assert abs(run.flops / budget - 1) < 0.02 and run.steps >= 50


def test_bad_grids_are_refused(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(TinyLMError, match="too small for an IsoFLOP curve"):
        plan_sweep(ScalingOptions(budgets=[1e10]))
    assert main(["scaling", "--depths", "2", "--out", "x"]) == 1
    assert "needs at least three sizes" in capsys.readouterr().err
    assert main(["scaling", "--budgets", "1e9", "--out", "x"]) == 1
    assert "budget 1e+09 FLOPs is too small" in capsys.readouterr().err
    assert main(["scaling", "fit", "--seeds", "1", "--out", "x"]) == 1
    assert "--seeds is for scaling predict" in capsys.readouterr().err
    assert main(["scaling", "nope"]) == 1
    assert "unknown action 'nope'" in capsys.readouterr().err
    assert main(["scaling", "predict", "--out", "nowhere"]) == 1
    assert "holds no sweep" in capsys.readouterr().err


def micro_options(out: Path, **changes: object) -> ScalingOptions:
    """A sweep on the test data (its 300-token vocabulary), budgets that take seconds."""
    fields: dict = dict(budgets=[3e10], depths=[1, 2, 3], out=str(out),
                        data=str(data_dir()), overrides={"vocab_size": VOCAB})
    return ScalingOptions(**{**fields, **changes})


def test_a_sweep_trains_its_points_and_resumes_without_retraining(tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                                                  capsys: pytest.CaptureFixture[str]) -> None:
    monkeypatch.setattr(sweep_module, "MIN_STEPS", 2)  # a sweep in seconds: depth 3 gets 3 steps
    monkeypatch.setattr(budget_module, "MIN_STEPS", 2)
    options = micro_options(tmp_path / "sweep")
    assert main(["scaling", "--budgets", "3e10", "--depths", "1,2,3", "--data", str(data_dir()), "--set",
                 f"vocab_size={VOCAB}", "--out", str(tmp_path / "sweep")]) == 0
    err = capsys.readouterr().err
    assert "scaling: 3 runs over 1 budget, " in err  # then the law: 3 points cannot make one, and it says so
    assert "every point is trained; no fit printed: Approach 3 fits 5 parameters: it needs at least 6" in err
    lines: list[str] = []
    rows = run_sweep(options, say=lines.append)  # the same sweep from Python: everything is trained already
    assert any("3 of 3 points already trained" in line for line in lines)
    assert [(r["budget"], r["depth"]) for r in rows] == [(3e10, 1), (3e10, 2), (3e10, 3)]
    for row in rows:
        planned = budget_run(row["depth"], row["budget"], overrides={"vocab_size": VOCAB})
        assert (row["flops"], row["tokens"], row["steps"]) == (planned.flops, planned.tokens, planned.steps)
        assert abs(row["flops"] - row["budget"]) <= row["flops"] / row["steps"]  # the nearest step count
        config = json.loads(sorted((tmp_path / "sweep" / row["run"] / "checkpoints").iterdir())[-1]
                            .joinpath("config.json").read_text())
        assert config["step"] == row["steps"] and config["model"]["n_blocks"] == row["depth"]
        assert config["train"]["batch_size"] == 4 * row["depth"]
    points = read_points(tmp_path / "sweep" / POINTS)
    assert [p.loss for p in points] == [r["loss"] for r in rows]
    again: list[str] = []
    assert run_sweep(options, say=again.append) == rows  # everything trained already: nothing runs
    assert any("3 of 3 points already trained" in line for line in again)
    assert not any("training" in line for line in again)
    # a sweep stopped after a run saved its checkpoint, before its row: the run resumes there, scores the same
    points_file = tmp_path / "sweep" / POINTS
    points_file.write_text("".join(line + "\n" for line in points_file.read_text().splitlines()[:-1]))
    resumed = run_sweep(options, say=again.append)
    assert [{**r, "wall_s": 0} for r in resumed] == [{**r, "wall_s": 0} for r in rows]
    with pytest.raises(TinyLMError, match="holds a sweep with another seed"):
        run_sweep(micro_options(tmp_path / "sweep", seed=7), say=lines.append)


def test_the_prediction_is_written_before_its_run(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    from test_scaling_fit import PLANTED, planted_points

    law = PLANTED["laptop"]
    _, fit = fit_points(planted_points(law, (1e11, 3e11, 1e12), noise=0.001), bootstrap=20)
    plan = plan_prediction(fit, 3e12, "modern")
    best = min(plan["candidates"], key=plan["candidates"].get)
    assert str(plan["depth"]) == best and plan["predicted_loss"] == plan["candidates"][best]
    run = budget_run(plan["depth"], 3e12)
    assert plan["predicted_loss"] == pytest.approx(fit.law.loss(run.params, run.tokens))
    assert next_budget([1e12, 3.16e12, 1e13]) == pytest.approx(1e13 * 1e13 / 3.16e12)  # one more grid step
    seen: list[bool] = []

    def fake_run_points(options: ScalingOptions, runs: list, seed: int, say: object, folder_name: object,
                        file: str) -> list[dict]:
        seen.append((Path(options.out) / PREDICTION).is_file())  # written before anything trains
        return [{"loss": plan["predicted_loss"] * (1 + 0.01 * seed)}]

    monkeypatch.setattr("tinylm.scaling.predict.run_points", fake_run_points)
    (tmp_path / "s").mkdir()
    done = run_prediction(ScalingOptions(out=str(tmp_path / "s")), fit, 3e12, [1, 2], lambda line: None)
    assert seen == [True, True]
    assert done["measured_mean"] == pytest.approx(plan["predicted_loss"] * 1.015)
    assert done["error"] == pytest.approx(1 / 1.015 - 1)
    assert json.loads((tmp_path / "s" / PREDICTION).read_text())["measured"] == done["measured"]


@pytest.mark.slow  # two spawned workers import torch: 13 s of the default suite for a path the docs measure
def test_jobs_train_the_points_in_pinned_worker_processes(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    import os

    if len(os.sched_getaffinity(0)) < 2:
        pytest.skip("two jobs need two cores")
    monkeypatch.setattr(sweep_module, "MIN_STEPS", 2)
    monkeypatch.setattr(budget_module, "MIN_STEPS", 2)
    shares = sweep_module._core_shares(2)
    assert len(shares) == 2 and not set(shares[0]) & set(shares[1]) and all(shares)
    lines: list[str] = []
    rows = run_sweep(micro_options(tmp_path / "two", jobs=2), say=lines.append)
    assert [(r["depth"], r["steps"]) for r in rows] == [(d, budget_run(d, 3e10, overrides={"vocab_size": VOCAB}).steps)
                                                        for d in (1, 2, 3)]
    assert all(r["loss"] > 0 for r in rows) and len(read_points(tmp_path / "two" / POINTS)) == 3
    with pytest.raises(TinyLMError, match="would put two runs on one core"):
        ScalingOptions(jobs=len(os.sched_getaffinity(0)) + 1)
