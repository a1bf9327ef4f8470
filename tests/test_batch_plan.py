"""The batch-size ramp, the sequence-length warmup and the weight-decay schedule: the plan in closed form, then
what a real pretraining run draws, counts, plans and resumes with them."""

from __future__ import annotations

import itertools
import time
import types
from pathlib import Path
from typing import Any

import pytest
import torch

from test_train_support import MICRO, config, hooked_build_model, losses, rows
from tinylm.checkpoint import list_checkpoints, load_train_state
from tinylm.errors import TinyLMError
from tinylm.models.factory import build_model
from tinylm.stages.pretrain import pretrain
from tinylm.stages.pretrain import stage as pretrain_stage
from tinylm.stages.pretrain.config import PretrainConfig
from tinylm.train import loop
from tinylm.train.batch_plan import BatchPlan, shrink
from tinylm.train.schedule import weight_decay_factor

PEAK = 1e12  # a fixed matmul peak: MFU x PEAK / tokens_per_s is then the FLOPs per token the loop counted


def test_the_plan_halves_twice_and_counts_tokens_in_closed_form() -> None:
    assert [shrink(s, 8) for s in range(10)] == [4, 4, 4, 4, 2, 2, 2, 2, 1, 1]
    assert [shrink(s, 3) for s in range(4)] == [4, 2, 2, 1] and [shrink(s, 1) for s in range(2)] == [2, 1]
    ramp = BatchPlan(16, 256, per_step=2, ramp_steps=8)
    assert [ramp.shape(s) for s in (0, 3, 4, 7, 8, 100)] == [(4, 256), (4, 256), (8, 256), (8, 256), (16, 256),
                                                             (16, 256)]
    full = 16 * 256 * 2
    # 4 steps of a quarter and 4 of a half: the tokens of 3 full steps
    assert ramp.tokens_before(8) == 3 * full and ramp.tokens_before(10) == 5 * full
    assert ramp.tokens_before(3) == 3 * full // 4
    # the fewest steps reaching a budget: inside the ramp and after it
    assert ramp.steps_for(full // 4) == 1 and ramp.steps_for(full // 4 + 1) == 2
    assert ramp.steps_for(3 * full) == 8 and ramp.steps_for(600 * full) == 605
    for tokens in (1, 5000, 3 * full - 1, 3 * full + 1, 50 * full + 7):
        steps = ramp.steps_for(tokens)
        assert ramp.tokens_before(steps) >= tokens > ramp.tokens_before(steps - 1)
    warm = BatchPlan(16, 256, per_step=1, seq_warmup_steps=6)
    assert [warm.shape(s) for s in (0, 2, 3, 5, 6)] == [(64, 64), (64, 64), (32, 128), (32, 128), (16, 256)]
    assert all(warm.step_tokens(s) == warm.full_tokens for s in range(10))  # the same tokens every step
    assert warm.steps_for(600 * warm.full_tokens) == 600
    both = BatchPlan(8, 32, ramp_steps=4, seq_warmup_steps=2)
    assert [both.shape(s) for s in range(5)] == [(8, 8), (4, 16), (4, 32), (4, 32), (8, 32)]
    assert BatchPlan(16, 256).describe() == []
    assert ramp.describe() == ["batch ramp: 4 for steps 1-4, 8 for steps 5-8, then 16 rows; its 8 steps carry the "
                               "tokens of 3 full ones"]
    assert "64 for steps 1-3, 128 for steps 4-6, then 256 tokens per row" in warm.describe()[0]
    # how much longer one step is than another, to first order: the ramp doubles at each stage, the warmup never
    assert ramp.tokens_ratio(4, 2) == 2 and ramp.tokens_ratio(8, 6) == 2 and ramp.tokens_ratio(1, -1) == 1
    assert warm.tokens_ratio(3, 1) == 1 and warm.tokens_ratio(6, 4) == 1


def test_the_plan_counts_the_shapes_a_run_will_compile() -> None:
    warm = BatchPlan(4, 16, seq_warmup_steps=4)  # (16, 4) x2, (8, 8) x2, then (4, 16)
    assert [warm.shapes(start, 10) for start in range(6)] == [3, 3, 2, 2, 1, 1]
    assert warm.shapes(0, 2) == 1 and warm.shapes(0, 3) == 2 and BatchPlan(4, 16).shapes(0, 10**9) == 1
    for ramp, warmup in itertools.product((0, 4, 6, 8), (0, 2, 4, 7)):  # both, of different lengths: up to five
        plan = BatchPlan(16, 16, ramp_steps=ramp, seq_warmup_steps=warmup)
        for start, end in ((0, 100), (3, 100), (5, 6), (0, 3)):
            assert plan.shapes(start, end) == len({plan.shape(s) for s in range(start, end)}), (ramp, warmup, start)


def test_shapes_that_cannot_be_quartered_are_refused_in_one_line() -> None:
    with pytest.raises(TinyLMError, match="--batch-size 6 must be a multiple of 4"):
        BatchPlan(6, 256, ramp_steps=10)
    with pytest.raises(TinyLMError, match="row length 30 must be a multiple of 4"):
        BatchPlan(16, 30, seq_warmup_steps=10)
    BatchPlan(6, 30)  # nothing asked, nothing refused
    # the batch is known before a run folder exists: refused by the config itself
    with pytest.raises(TinyLMError, match="--batch-size 6 must be a multiple of 4"):
        PretrainConfig(batch_size=6, batch_ramp_steps=10)
    with pytest.raises(TinyLMError, match="row length 30 must be a multiple of 4"):
        PretrainConfig(seq_len=30, seq_len_warmup_steps=10)


def _record_shapes(monkeypatch: pytest.MonkeyPatch) -> list[tuple[int, ...]]:
    """The input shape of every training forward of the next run."""
    seen: list[tuple[int, ...]] = []

    def hook(module: torch.nn.Module, args: Any, output: Any) -> None:
        if module.training:
            seen.append(tuple(args[0].shape))

    monkeypatch.setattr(pretrain_stage, "build_model", hooked_build_model(hook))
    return seen


def test_a_sequence_warmup_run_trains_on_short_rows_with_the_same_tokens(tmp_path: Path,
                                                                          monkeypatch: pytest.MonkeyPatch) -> None:
    seen = _record_shapes(monkeypatch)
    monkeypatch.setattr(loop, "peak_flops", lambda device, dtype: PEAK)
    summary = pretrain(config(tmp_path / "warm", max_steps=6, seq_len_warmup_steps=4, grad_accum=2))
    # batch 4 x 16 tokens: 16 rows of 4, then 8 rows of 8, then 4 of 16; two micro-batches a step
    assert seen == [(16, 4)] * 4 + [(8, 8)] * 4 + [(4, 16)] * 4
    assert summary.tokens == 6 * 2 * 4 * 16
    logged = [r for r in rows(tmp_path / "warm") if "loss" in r]
    assert [r["tokens"] for r in logged] == [128 * s for s in range(1, 7)]
    # MFU counts the attention of the rows trained on: a 4-token row's FLOPs per token, not a 16-token one's
    model = build_model(config(None).model_config())
    per_token = [r["mfu"] * PEAK / r["tokens_per_s"] for r in logged]
    assert model.flops_per_token(4) < model.flops_per_token(8) < model.flops_per_token(16)
    assert per_token[0] == pytest.approx(model.flops_per_token(4))
    assert per_token[2] == pytest.approx(model.flops_per_token(8))
    assert per_token[5] == pytest.approx(model.flops_per_token(16))


def test_a_batch_ramp_counts_its_short_steps_and_plans_a_token_budget(tmp_path: Path,
                                                                      monkeypatch: pytest.MonkeyPatch) -> None:
    seen = _record_shapes(monkeypatch)
    # 64 tokens a full step; the ramp's 4 steps carry 16+16+32+32 = 96, so a budget of 96 + 7 x 64 takes 11 steps
    out = tmp_path / "ramp"
    summary = pretrain(config(out, max_steps=1000, max_tokens=544, batch_ramp_steps=4, schedule="linear",
                              seq_len_warmup_steps=0))
    assert summary.steps == 11 and summary.tokens == 544 and summary.stopped == "max_tokens"
    assert seen == [(1, 16)] * 2 + [(2, 16)] * 2 + [(4, 16)] * 7
    logged = [r for r in rows(out) if "loss" in r]
    assert [r["tokens"] for r in logged] == [16, 32, 64, 96] + [96 + 64 * k for k in range(1, 8)]
    # the schedule was planned over the 11 steps the budget takes, so its last update lands on the final lr
    assert logged[-1]["lr"] == pytest.approx(0.02 * 0.1)  # the first group's: Muon's


def test_a_time_budget_foresees_the_ramp_doubling_the_next_step(tmp_path: Path,
                                                                 monkeypatch: pytest.MonkeyPatch) -> None:
    """A step of the ramp's next stage carries twice the tokens and takes twice as long: the budget check must
    expect that, not the last step's length again, or the run ends past its budget."""
    drawn, readings = [0], itertools.count()
    # a clock on which a step lasts a millisecond per token it draws
    monkeypatch.setattr(loop, "time", types.SimpleNamespace(
        perf_counter=lambda: drawn[0] * 1e-3 + next(readings) * 1e-9, time=time.time))
    original = pretrain_stage.PretrainStage.next_batch

    def counted(self: pretrain_stage.PretrainStage) -> Any:
        x, y = original(self)
        drawn[0] += y.numel()
        return x, y

    monkeypatch.setattr(pretrain_stage.PretrainStage, "next_batch", counted)
    # batch 4 x 16: steps 1-4 of the ramp carry 16 tokens (16 ms), steps 5-8 32 ms. Step 4 ends at 64 ms, and step
    # 5 would end at 96 ms, past the 85 ms budget: the run stops after step 4 (the last step's 16 ms again would
    # have predicted 80 ms, and run step 5 to 96 ms)
    summary = pretrain(config(tmp_path, max_steps=100, batch_ramp_steps=8, time_budget=0.085))
    assert summary.stopped == "time_budget" and summary.steps == 4
    assert load_train_state(list_checkpoints(tmp_path)[-1])["train_seconds"] <= 0.085


def test_exact_resume_inside_the_ramp_and_the_warmup(tmp_path: Path) -> None:
    kw: dict[str, Any] = dict(overrides={**MICRO, "dropout": 0.1}, schedule_steps=8, batch_ramp_steps=6,
                              seq_len_warmup_steps=4, weight_decay_schedule="linear")
    pretrain(config(tmp_path / "straight", max_steps=8, **kw))
    pretrain(config(tmp_path / "resumed", max_steps=3, **kw))
    pretrain(config(tmp_path / "resumed", max_steps=8, resume="latest", **kw))
    assert losses(tmp_path / "resumed") == losses(tmp_path / "straight")
    assert [r["tokens"] for r in rows(tmp_path / "resumed") if "loss" in r] == \
        [r["tokens"] for r in rows(tmp_path / "straight") if "loss" in r]


def test_a_resume_with_another_grad_accum_keeps_its_place_in_the_warmup(tmp_path: Path,
                                                                         monkeypatch: pytest.MonkeyPatch) -> None:
    """The warmup is a function of the optimizer step, not of the micro-batches drawn before a resume."""
    seen = _record_shapes(monkeypatch)
    kw: dict[str, Any] = dict(schedule_steps=6, seq_len_warmup_steps=4)
    pretrain(config(tmp_path / "run", max_steps=2, grad_accum=1, **kw))
    assert seen == [(16, 4)] * 2
    seen.clear()
    pretrain(config(tmp_path / "run", max_steps=6, grad_accum=2, resume="latest", **kw))
    # steps 3-4 are the warmup's second stage (8 rows of 8), steps 5-6 whole rows; two micro-batches a step
    assert seen == [(8, 8)] * 4 + [(4, 16)] * 4


def test_the_weight_decay_schedule_is_its_formula_and_constant_changes_nothing(tmp_path: Path) -> None:
    assert [weight_decay_factor("linear", p, 5) for p in range(6)] == [1.0, 0.75, 0.5, 0.25, 0.0, 0.0]
    assert weight_decay_factor("constant", 3, 5) == 1.0
    with pytest.raises(TinyLMError, match="unknown weight-decay schedule"):
        weight_decay_factor("cosine", 0, 5)
    plain = pretrain(config(tmp_path / "plain", max_steps=5, weight_decay=0.5))
    constant = pretrain(config(tmp_path / "constant", max_steps=5, weight_decay=0.5,
                               weight_decay_schedule="constant"))
    assert losses(tmp_path / "plain") == losses(tmp_path / "constant") and plain.final_loss == constant.final_loss
    for optimizer in ("adamw", "muon"):
        out = tmp_path / f"linear-{optimizer}"
        pretrain(config(out, max_steps=5, weight_decay=0.5, weight_decay_schedule="linear", optimizer=optimizer))
        groups = load_train_state(list_checkpoints(out)[-1])["optimizer"]
        groups = groups.get("optimizers", [groups])
        decays = [(g["initial_weight_decay"], g["weight_decay"]) for o in groups for g in o["param_groups"]]
        # the last update (step 4 of 5) ran with the coefficient at 0; the base stays for a resume
        assert (0.5, 0.0) in decays and all(wd == 0.0 for _, wd in decays)
    # the same first step (decay acts in the update), then a smaller pull toward zero: other losses
    linear, constant_losses = losses(tmp_path / "linear-adamw"), losses(tmp_path / "plain")
    assert linear[0] == constant_losses[0] and linear[2:] != constant_losses[2:]


def test_post_training_stages_do_not_take_pretraining_options(capsys: pytest.CaptureFixture[str]) -> None:
    from tinylm.cli.main import main

    for command in ("sft", "dpo", "rl"):
        with pytest.raises(SystemExit) as exit_code:
            main([command, "--help"])
        assert exit_code.value.code == 0
        text = capsys.readouterr().out
        for flag in ("--batch-ramp-steps", "--seq-len-warmup-steps", "--z-loss", "--target-dev-bpb"):
            assert flag not in text, (command, flag)
        assert "--weight-decay-schedule" in text  # the engine's own option: every stage has it
    default = PretrainConfig()
    assert default.batch_ramp_steps == 0 and default.seq_len_warmup_steps is None  # unset: the default


def test_a_stage_that_draws_its_own_batches_has_no_plan_to_refuse(capsys: pytest.CaptureFixture[str]) -> None:
    """SFT, DPO and RL draw their own rows: the plan's options are pretraining's fields, not theirs, so a plan they
    would not follow cannot be asked of them at all: not from Python, not on the command line."""
    from tinylm.cli.main import main
    from tinylm.stages.sft.config import SFTConfig

    with pytest.raises(TypeError, match="batch_ramp_steps"):
        SFTConfig(base="runs/x", batch_ramp_steps=4)  # type: ignore[call-arg]
    assert main(["sft", "--base", "runs/x", "--batch-ramp-steps", "4"]) == 2
    assert "unrecognized arguments: --batch-ramp-steps" in capsys.readouterr().err
