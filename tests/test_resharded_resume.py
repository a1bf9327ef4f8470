"""A run checkpointed by 2 ranks resumes on 1, and a 1-rank run on 2, FSDP2 included: the model and optimizer
state are whole, the data goes on from where it stopped, and at the same global batch the losses continue
those of an uninterrupted run up to the order of float sums. Post-training rows count as a position in rows,
so a change of global batch neither repeats nor skips a row."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch

from test_ddp import torchrun
from test_train_support import cli_args, config, losses
from tinylm.checkpoint import list_checkpoints, load_train_state
from tinylm.checkpoint.layout import TRAIN_STATE
from tinylm.cli.main import main
from tinylm.data.row_loader import RowLoader
from tinylm.stages.pretrain import pretrain
from tinylm.train.batch_plan import BatchPlan
from tinylm.train.run_checkpoint import schedule_change, world_size_note
from tinylm.train.schedule import LRSchedule

pytestmark = pytest.mark.usefixtures("one_thread")
STEPS, SPLIT = 6, 3


def args(out: Path, batch: int, steps: int, *extra: str) -> list[str]:
    found = cli_args(out, "--batch-size", str(batch), "--max-steps", str(steps), "--schedule-steps", str(STEPS),
                     *extra)
    found[found.index("--threads") + 1] = "1"
    return found


def on(processes: int, argv: list[str]) -> str:
    """Run `tinylm ARGV` on `processes` processes (global batch 4 either way); its stderr."""
    if processes == 1:
        assert main(argv) == 0
        return ""
    result = torchrun(*argv)
    assert result.returncode == 0, result.stderr[-3000:]
    return result.stderr


@pytest.mark.parametrize(("before", "after", "fsdp"), [
    pytest.param(2, 1, False, id="ddp-2-to-1"), pytest.param(1, 2, False, id="1-to-ddp-2", marks=pytest.mark.slow),
    pytest.param(2, 1, True, id="fsdp-2-to-1", marks=pytest.mark.slow),
    pytest.param(1, 2, True, id="1-to-fsdp-2", marks=pytest.mark.slow)])
def test_a_run_resumes_on_another_number_of_processes(tmp_path: Path, capsys: pytest.CaptureFixture[str],
                                                       before: int, after: int, fsdp: bool) -> None:
    def extra(processes: int) -> list[str]:
        return ["--fsdp"] if fsdp and processes > 1 else []

    # the uninterrupted run on one process: 2 processes equal 1 at the same global batch (tests/test_ddp.py)
    on(1, args(tmp_path / "straight", 4, STEPS))
    run = tmp_path / "resized"
    on(before, args(run, 4 // before, SPLIT, *extra(before)))
    said = on(after, args(run, 4 // after, STEPS, "--resume", "latest", *extra(after))) + capsys.readouterr().err
    processes = "1 process" if after == 1 else f"{after} processes"
    assert f"resuming on {processes} instead of {before} at the same global batch (64 tokens/step)" in said
    assert "not bit for bit" in said  # the header says a change of size cannot be exact
    resumed, straight = losses(run), losses(tmp_path / "straight")
    assert len(resumed) == STEPS and resumed[:SPLIT] == pytest.approx(straight[:SPLIT], abs=1e-5)
    assert resumed[SPLIT:] == pytest.approx(straight[SPLIT:], abs=1e-5)  # whole optimizer state, same data



def test_another_number_of_processes_names_the_global_batch_and_the_option_that_keeps_it() -> None:
    fewer = world_size_note(2, 1, 8192, BatchPlan(16, 256, per_step=1))
    assert fewer == ("resuming on 1 process instead of 2: the global batch is now 4,096 tokens/step (was 8,192); "
                     "pass --batch-size 32 to keep it")
    more = world_size_note(1, 2, 8192, BatchPlan(32, 256, per_step=2))
    assert more.endswith("now 16,384 tokens/step (was 8,192); pass --batch-size 16 to keep it")
    # 24 rows of 2 x 4 x accum 3, now on 1 process with --grad-accum 4: 6 rows a micro-batch, unless a batch ramp
    # needs a batch it can quarter; then 6 micro-batches of 4
    assert world_size_note(2, 1, 24 * 128, BatchPlan(4, 128, per_step=4)).endswith("pass --batch-size 6 to keep it")
    assert world_size_note(2, 1, 24 * 128, BatchPlan(4, 128, per_step=4, ramp_steps=8)).endswith(
        "pass --grad-accum 6 to keep it")
    assert world_size_note(3, 2, 3 * 5 * 64, BatchPlan(5, 64, per_step=2)).endswith(
        "no --batch-size or --grad-accum gives it back on 2 processes")
    same = world_size_note(2, 1, 8192, BatchPlan(32, 256, per_step=1))
    assert same.startswith("resuming on 1 process instead of 2 at the same global batch (8,192 tokens/step)")


def test_a_changed_schedule_is_said_field_by_field() -> None:
    saved = LRSchedule("cosine", total=10, warmup=10).to_dict()
    assert schedule_change(saved, LRSchedule("cosine", total=20, warmup=20).to_dict()) == (
        "steps: 10 -> 20, warmup steps: 10 -> 20")
    assert schedule_change(saved, LRSchedule("wsd", total=10, warmup=10, min_ratio=0.0).to_dict()) == (
        "schedule: cosine -> wsd, min lr ratio: 0.1 -> 0")
    assert schedule_change(saved, LRSchedule("cosine", total=10, warmup=10).to_dict()) == ""


def test_a_resume_on_fewer_processes_says_so_in_one_line_each(tmp_path: Path,
                                                             capsys: pytest.CaptureFixture[str]) -> None:
    """Through the resume path on one process: a checkpoint whose train state says 2 processes wrote it (as
    torchrun's would) is resumed on 1 without --batch-size, and with --max-steps past the schedule it planned."""
    pretrain(config(tmp_path, max_steps=3, batch_size=2))
    checkpoint = list_checkpoints(tmp_path)[-1]
    state = load_train_state(checkpoint)
    torch.save({**state, "world_size": 2}, checkpoint / TRAIN_STATE)
    capsys.readouterr()
    pretrain(config(tmp_path, max_steps=6, batch_size=2, resume="latest"))
    said = capsys.readouterr().err.splitlines()
    assert ("note: resuming on 1 process instead of 2: the global batch is now 32 tokens/step (was 64); "
            "pass --batch-size 4 to keep it") in said
    assert "note: the lr schedule changed on resume: steps: 3 -> 6" in said


def test_post_training_rows_go_on_from_the_next_row_whatever_the_new_global_batch() -> None:
    rows = {"ids": torch.arange(10)}
    before = [RowLoader(rows, 2, seed=7, rank=r, world_size=2) for r in range(2)]
    seen = [int(i) for _ in range(3) for loader in before for i in loader.next_batch()["ids"]]  # 12 rows, >1 epoch
    after = RowLoader(rows, 3, seed=7)
    after.load_state_dict(before[0].state_dict())
    seen += [int(i) for _ in range(4) for i in after.next_batch()["ids"]]  # 12 more, one process, batch 3
    one = RowLoader(rows, 1, seed=7)
    stream = [int(one.next_batch()["ids"][0]) for _ in range(24)]
    assert seen == stream  # the 24 rows of the stream in order: none twice, none skipped
    assert sorted(stream[:10]) == list(range(10)) and sorted(stream[10:20]) == list(range(10))  # whole epochs


def test_a_version_1_row_position_is_read_as_steps_of_the_current_global_batch() -> None:
    """Checkpoints from before the row position counted steps: at the run's own global batch they resume on the
    same rows as before."""
    rows = {"ids": torch.arange(10)}
    old = RowLoader(rows, 2, seed=3, world_size=1)
    for _ in range(4):
        old.next_batch()
    resumed = RowLoader(rows, 2, seed=3)
    resumed.load_state_dict({"version": 1, "seed": 3, "step": 4, "rows": 10})
    assert resumed.position == old.position == 8
    assert torch.equal(resumed.next_batch()["ids"], old.next_batch()["ids"])
