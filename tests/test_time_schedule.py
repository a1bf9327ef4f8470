"""A time budget plans the schedule: the decay happens inside the budget whatever the machine's speed."""

from __future__ import annotations

import time
from pathlib import Path

import pytest

from test_train_loop import training_calls
from test_train_support import config, hooked_build_model, rows
from tinylm.checkpoint import list_checkpoints, load_train_state
from tinylm.stages.pretrain import pretrain
from tinylm.stages.pretrain import stage as pretrain_stage
from tinylm.train.schedule import LRSchedule


def test_without_a_budget_the_clock_changes_nothing() -> None:
    s = LRSchedule("wsd", total=100, warmup=10, min_ratio=0.0, decay_fraction=0.2)
    assert [s.factor(i, seconds=1e9) for i in range(120)] == [s.factor(i) for i in range(120)]


def test_a_fast_machine_follows_the_steps() -> None:
    """The steps end first: the schedule is the step schedule, exactly."""
    timed = LRSchedule("cosine", total=100, warmup=5, min_ratio=0.1, time_budget=600.0)
    plain = LRSchedule("cosine", total=100, warmup=5, min_ratio=0.1)
    assert [timed.factor(i, seconds=i * 1.0) for i in range(100)] == [plain.factor(i) for i in range(100)]


def test_a_slow_machine_follows_the_clock() -> None:
    """Half the steps fit in the budget: the decay begins at 80% of the seconds, not 80% of the steps."""
    s = LRSchedule("wsd", total=1000, warmup=0, min_ratio=0.0, decay_fraction=0.2, time_budget=100.0)
    step_time = 0.2  # 500 steps fit
    lrs = [s.factor(i, seconds=(i + 1) * step_time) for i in range(500)]
    stable = [i for i, lr in enumerate(lrs) if lr == 1.0]
    assert stable[-1] == pytest.approx(0.8 * 500, abs=2)  # the decay starts at 80 s
    assert lrs[-1] == pytest.approx(0.0, abs=0.01)  # and ends at the budget
    assert all(a >= b for a, b in zip(lrs, lrs[1:]))
    cosine = LRSchedule("cosine", total=1000, warmup=0, min_ratio=0.1, time_budget=100.0)
    assert cosine.factor(250, seconds=50.0) == pytest.approx(0.55, abs=0.01)  # halfway in time: halfway down
    assert cosine.factor(499, seconds=100.0) == pytest.approx(0.1)


def test_a_budgeted_run_on_a_slow_machine_decays_before_the_clock_stops_it(tmp_path: Path,
                                                                          monkeypatch: pytest.MonkeyPatch) -> None:
    """10,000 planned steps, ~12 fit in the budget: the schedule still reaches its floor (it ended at full lr)."""
    slow = hooked_build_model(training_calls(1, lambda o, n: time.sleep(0.05)))
    monkeypatch.setattr(pretrain_stage, "build_model", slow)
    summary = pretrain(config(tmp_path, max_steps=10_000, time_budget=0.8, schedule="wsd", warmup_steps=0,
                              decay_fraction=0.5, min_lr_ratio=0.0, lr=1e-3, optimizer="adamw"))
    assert summary.stopped == "time_budget" and summary.steps < 100
    lrs = [r["lr"] for r in rows(tmp_path) if "loss" in r]
    assert lrs[0] == pytest.approx(1e-3)
    assert lrs[-1] < 0.35e-3, lrs  # the last updates are well into the decay
    assert all(a >= b for a, b in zip(lrs, lrs[1:]))
    state = load_train_state(list_checkpoints(tmp_path)[-1])
    # the stop is predicted from the last step, so a step slower than it may overshoot by the difference (jitter)
    assert state["schedule"]["time_budget"] == 0.8 and 0.5 < state["train_seconds"] <= 0.8 + 0.03


def test_the_budget_counts_across_resumes(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A spent budget stays spent on --resume; a larger one continues the clock where the run left it."""
    slow = hooked_build_model(training_calls(1, lambda o, n: time.sleep(0.05)))
    monkeypatch.setattr(pretrain_stage, "build_model", slow)
    first = pretrain(config(tmp_path, max_steps=10_000, time_budget=0.5))
    spent = load_train_state(list_checkpoints(tmp_path)[-1])["train_seconds"]
    again = pretrain(config(tmp_path, max_steps=10_000, time_budget=0.5, resume="latest"))
    assert again.stopped == "time_budget" and again.steps == first.steps  # nothing left to do
    more = pretrain(config(tmp_path, max_steps=10_000, time_budget=1.0, resume="latest"))
    assert more.steps > first.steps
    resumed = [r for r in rows(tmp_path) if "loss" in r and r["step"] > first.steps]
    assert resumed[0]["elapsed_s"] > spent  # the clock went on from the checkpoint's seconds
    assert resumed[-1]["elapsed_s"] <= 1.0 + 0.1
