"""Rollouts whose advantage is zero everywhere leave the update (stages/rl/inert_rows.py): the run's losses
and weights are the ones computing every row gives, and the update forwards fewer tokens."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
import torch

import tinylm.stages.rl.collect as collect
from test_rl import final_weights, rl_config
from test_train_support import losses, rows
from tinylm.stages.rl.algorithms import algorithms
from tinylm.stages.rl.inert_rows import drop_inert_rows, rows_can_be_dropped
from tinylm.stages.rl.stage import RLStage
from tinylm.tasks.task import Example
from tinylm.train.loop import run_training

pytestmark = pytest.mark.usefixtures("one_thread")


def half_informative_reward(response: str, example: Example) -> float:
    """Odd answers: a reward the group's samples differ in; even answers: 1 whatever was said (an inert group)."""
    return float(len(response) % 2) if int(example.answer) % 2 else 1.0


def run(out: Path, monkeypatch: pytest.MonkeyPatch, drop: bool, **changes: Any) -> list[int]:
    """One RL run; returns the tokens each micro-batch's update forwarded."""
    seen: list[int] = []
    original = RLStage.batch_tokens

    def spy(self: RLStage, batch: dict[str, Any]) -> int:
        seen.append(original(self, batch))
        return seen[-1]

    with monkeypatch.context() as patch:
        patch.setattr(RLStage, "batch_tokens", spy)
        if not drop:
            patch.setattr(collect, "rows_can_be_dropped", lambda algo, has_reference: False)
        config = {"reward": "test_rl_inert_rows:half_informative_reward", "batch_size": 4, "max_steps": 3,
                  "beta": 0.0, **changes}
        run_training(rl_config(out, config.pop("algo", "grpo"), **config), stage=RLStage())
    return seen


@pytest.mark.parametrize("changes", [{}, {"grad_accum": 2, "batch_size": 2}, {"algo": "dapo"}],
                         ids=["grpo", "grpo-accum", "dapo"])
def test_dropping_inert_rows_changes_no_loss_and_no_weight(tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                                           changes: dict[str, Any]) -> None:
    dropped = run(tmp_path / "dropped", monkeypatch, True, **changes)
    every = run(tmp_path / "every", monkeypatch, False, **changes)
    assert losses(tmp_path / "dropped") == pytest.approx(losses(tmp_path / "every"), abs=1e-6)
    a, b = final_weights(tmp_path / "dropped"), final_weights(tmp_path / "every")
    for name in a:
        assert torch.allclose(a[name], b[name], atol=2e-6), name
    assert sum(dropped) < sum(every)  # the inert groups were not computed
    informative = [r["informative_frac"] for r in rows(tmp_path / "every") if "loss" in r]
    assert min(informative) < 1 and max(informative) > 0  # both kinds of group were there


def test_a_micro_batch_of_inert_rows_keeps_one_and_cuts_its_columns() -> None:
    mask = torch.zeros(4, 9)
    mask[0, 2:5] = mask[1, 2:7] = mask[2, 2:4] = mask[3, 2:8] = 1.0
    batch = {"ids": torch.arange(40).reshape(4, 10), "mask": mask, "old_logp": -mask,
             "advantages": torch.zeros(4, 9), "reward": torch.ones(4)}
    assert drop_inert_rows(batch) == 3.0  # row 0 stands in: the update still runs forward and backward
    assert batch["ids"].tolist() == [list(range(6))] and batch["mask"].shape == (1, 5)
    batch = {"ids": torch.arange(40).reshape(4, 10), "mask": mask.clone(), "advantages": mask * torch.tensor(
        [[0.0], [1.5], [0.0], [-0.5]]), "reward": torch.tensor([0.0, 1.0, 2.0, 3.0])}
    assert drop_inert_rows(batch) == 11.0  # rows 1 and 3, up to row 3's last target (column 7)
    assert batch["reward"].tolist() == [1.0, 3.0] and batch["ids"].shape == (2, 9)


def test_rows_stay_when_a_kl_term_or_a_value_head_reads_them() -> None:
    algos = algorithms()
    assert rows_can_be_dropped(algos["grpo"], has_reference=True) == (algos["grpo"].beta == 0)
    assert not rows_can_be_dropped(algos["ppo"], has_reference=False)
    assert rows_can_be_dropped(algos["dapo"], has_reference=False)


def test_a_round_saved_mid_step_keeps_its_dropped_rows_and_resumes_bit_exact(tmp_path: Path) -> None:
    """Two epochs per round: the checkpoint at step 3 holds round 2's micro-batches, inert rows already gone."""
    config = {"reward": "test_rl_inert_rows:half_informative_reward", "beta": 0.0, "epochs": 2}
    run_training(rl_config(tmp_path / "straight", "grpo", max_steps=4, **config), stage=RLStage())
    run_training(rl_config(tmp_path / "split", "grpo", max_steps=3, **config), stage=RLStage())
    run_training(rl_config(tmp_path / "split", "grpo", max_steps=4, resume="latest", **config), stage=RLStage())
    assert losses(tmp_path / "split") == losses(tmp_path / "straight")
    straight, split = final_weights(tmp_path / "straight"), final_weights(tmp_path / "split")
    assert all(torch.equal(straight[k], split[k]) for k in straight)
