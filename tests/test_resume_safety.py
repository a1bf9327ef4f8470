"""Resuming never destroys history: the newest checkpoint with full state is continued, or the run is refused.

A weights-only checkpoint (no train_state.pt) restarts at step 0; doing that inside a run folder that
already holds checkpoints would truncate its metrics.jsonl and let pruning delete the checkpoints
that could still resume it.
"""

from __future__ import annotations

from pathlib import Path

import pytest
import torch

from test_train_support import config, rows
from tinylm.checkpoint import TRAIN_STATE, list_checkpoints, save_checkpoint
from tinylm.errors import TinyLMError
from tinylm.models.factory import build_model
from tinylm.presets import preset_config
from tinylm.stages.pretrain import pretrain
from tinylm.train.run_dir import plan_resume

pytestmark = pytest.mark.usefixtures("one_thread")


def run_with(root: Path, full: tuple[int, ...], weights_only: tuple[int, ...] = ()) -> Path:
    """A run folder with checkpoints at the given steps, with and without train_state.pt."""
    model_config = preset_config("tiny", "modern", vocab_size=64, context_length=16, n_embed=32, n_head=2,
                                 n_blocks=1, n_kv_head=1)
    torch.manual_seed(0)
    model = build_model(model_config)
    for step in sorted(full + weights_only):
        state = {"step": step} if step in full else None
        save_checkpoint(root, step, model, model_config, train_state=state)
    return root


def step(root: Path, n: int) -> Path:
    return root / "checkpoints" / f"step_{n:08d}"


def test_latest_skips_newer_weights_only_checkpoints_and_says_so(tmp_path: Path) -> None:
    run = run_with(tmp_path / "run", full=(1, 2), weights_only=(3, 4))
    plan = plan_resume("latest", run)
    assert plan.checkpoint == step(run, 2)
    assert len(plan.notes) == 1 and "step_00000002" in plan.notes[0] and "step_00000003, step_00000004" in plan.notes[0]
    assert plan_resume(str(run), tmp_path / "fork") == plan  # a run folder named by path: the same choice
    assert plan_resume("latest", run).checkpoint == step(run, 2)


def test_latest_with_only_weights_only_checkpoints_is_refused(tmp_path: Path) -> None:
    run = run_with(tmp_path / "run", full=(), weights_only=(0,))
    with pytest.raises(TinyLMError, match=r"only weights-only checkpoints .*--resume .*step_00000000 --out NEW"):
        plan_resume("latest", run)
    assert plan_resume(str(run), tmp_path / "tuned").checkpoint == step(run, 0)  # into a new folder: fine


def test_explicit_resume_that_would_restart_over_history_is_refused(tmp_path: Path) -> None:
    run = run_with(tmp_path / "run", full=(1, 2), weights_only=(3,))
    with pytest.raises(TinyLMError) as err:
        plan_resume(str(step(run, 3)), run)
    assert str(err.value) == (f"{step(run, 3)} has no {TRAIN_STATE}: resuming it would restart {run} at step 0 over "
                              "its checkpoints; continue from step_00000002 (full state) with --resume latest, or "
                              "train its weights into a new --out")
    with pytest.raises(TinyLMError, match="step_00000001 is older than step_00000002"):
        plan_resume(str(step(run, 1)), run)
    other = run_with(tmp_path / "other", full=(5,))
    with pytest.raises(TinyLMError, match="already holds checkpoints of another run"):
        plan_resume(str(step(other, 5)), run)
    assert plan_resume(str(step(run, 1)), tmp_path / "branch").checkpoint == step(run, 1)  # a new folder: fine
    assert plan_resume(str(step(run, 2)), run).checkpoint == step(run, 2)  # the newest full state, named


def test_resume_latest_continues_full_state_and_keeps_metrics_history(tmp_path: Path) -> None:
    """The issue's case end to end: the newest checkpoint lost its train state. The run continues from the
    one before, keeping its logged rows, instead of restarting at step 0 and deleting them; with nothing
    resumable left it is refused and nothing is touched."""
    run = tmp_path / "run"
    kw: dict[str, int] = dict(checkpoint_every=1, keep_last=2)
    pretrain(config(run, max_steps=2, **kw))
    (step(run, 2) / TRAIN_STATE).unlink()
    first_row = rows(run)[0]
    summary = pretrain(config(run, max_steps=3, resume="latest", **kw))
    assert summary.steps == 3 and rows(run)[0] == first_row  # step 1's row is the original one
    assert [r["step"] for r in rows(run) if "loss" in r] == [1, 2, 3]
    assert list_checkpoints(run) == [step(run, 2), step(run, 3)]

    for path in list_checkpoints(run):
        (path / TRAIN_STATE).unlink()
    before = rows(run)
    with pytest.raises(TinyLMError, match="nothing to resume"):
        pretrain(config(run, max_steps=4, resume="latest", **kw))
    assert rows(run) == before and list_checkpoints(run) == [step(run, 2), step(run, 3)]
