"""A run checkpointed by 2 ranks resumes on 1, and a 1-rank run on 2, FSDP2 included: the model and optimizer
state are whole, the data goes on from where it stopped, and at the same global batch the losses continue
those of an uninterrupted run up to the order of float sums. Post-training rows count as a position in rows,
so a change of global batch neither repeats nor skips a row."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch

from test_ddp import torchrun
from test_train_support import cli_args, losses
from tinylm.cli.main import main
from tinylm.data.row_loader import RowLoader

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

    on(2, args(tmp_path / "straight", 2, STEPS, *extra(2)))
    run = tmp_path / "resized"
    on(before, args(run, 4 // before, SPLIT, *extra(before)))
    said = on(after, args(run, 4 // after, STEPS, "--resume", "latest", *extra(after))) + capsys.readouterr().err
    assert f"checkpoint written by {before} processes, resumed by {after}" in said
    assert "not bit for bit" in said  # the header says a change of size cannot be exact
    resumed, straight = losses(run), losses(tmp_path / "straight")
    assert len(resumed) == STEPS and resumed[:SPLIT] == pytest.approx(straight[:SPLIT], abs=1e-5)
    assert resumed[SPLIT:] == pytest.approx(straight[SPLIT:], abs=1e-5)  # whole optimizer state, same data


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
