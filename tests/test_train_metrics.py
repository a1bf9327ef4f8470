"""metrics.jsonl writing/reading/truncation, the loss plot, the sample helper and the OOM/NaN messages."""

from __future__ import annotations

import errno
import io
import json
import os
import random
from pathlib import Path

import pytest
import torch

from tinylm.errors import TinyLMError, is_oom
from tinylm.metrics import MetricsLogger, read_metrics, truncate_after
from tinylm.models.factory import build_model
from tinylm.presets import preset_config
from tinylm.stages.pretrain.sample import sample_ids
from tinylm.train.faults import oom_message
from tinylm.train.plot import plot_runs, smooth
from tinylm.train.progress import Progress

pytestmark = pytest.mark.usefixtures("one_thread")


def write_run(run: Path, steps: int = 30) -> None:
    logger = MetricsLogger(run)
    for step in range(1, steps + 1):
        logger.log({"step": step, "loss": 5.0 - step * 0.1, "lr": 1e-3, "tokens_per_s": 1000.0})
        if step % 10 == 0:
            logger.log({"step": step, "dev_loss": 5.0 - step * 0.09, "dev_bpb": 2.0})
    logger.close()


def test_rows_round_trip_exactly(tmp_path: Path) -> None:
    logger = MetricsLogger(tmp_path)
    value = 0.1 + 0.2  # not representable in few digits: repr must round-trip it
    logger.log({"step": 1, "loss": value, "lr": 1e-3, "tokens_per_s": 5.0, "grad_norm": float("nan")})
    logger.close()
    (row,) = read_metrics(tmp_path)
    assert row["loss"] == value and row["grad_norm"] == "nan"
    json.loads((tmp_path / "metrics.jsonl").read_text())  # strict JSON: no bare NaN


def test_inactive_logger_writes_nothing(tmp_path: Path) -> None:
    logger = MetricsLogger(tmp_path / "rank1", active=False)
    logger.log({"step": 1, "loss": 1.0})
    logger.close()
    assert not (tmp_path / "rank1").exists()


def test_torn_last_line_is_skipped_and_truncation(tmp_path: Path) -> None:
    write_run(tmp_path)
    with (tmp_path / "metrics.jsonl").open("a") as f:
        f.write('{"step": 31, "lo')  # killed mid-write
    rows = read_metrics(tmp_path)
    assert rows[-1]["step"] == 30
    truncate_after(tmp_path, 20)
    assert max(r["step"] for r in read_metrics(tmp_path)) == 20
    assert len([r for r in read_metrics(tmp_path) if "dev_loss" in r]) == 2


def test_missing_metrics_is_a_user_error(tmp_path: Path) -> None:
    with pytest.raises(TinyLMError, match="metrics.jsonl"):
        read_metrics(tmp_path)


@pytest.mark.parametrize("module, package", [("wandb", "wandb"), ("torch.utils.tensorboard", "tensorboard")])
def test_optional_loggers_need_their_packages(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, module: str,
                                              package: str) -> None:
    """Both are extras (`pip install tinylm[logging]`): without one, its flag says what to install."""
    import builtins

    real_import = builtins.__import__

    def missing(name: str, *args: object, **kwargs: object) -> object:
        if name == module:
            raise ImportError(name)
        return real_import(name, *args, **kwargs)

    monkeypatch.setattr(builtins, "__import__", missing)
    with pytest.raises(TinyLMError, match=f"pip install {package}"):
        if package == "wandb":
            MetricsLogger(tmp_path, wandb=True)
        else:
            MetricsLogger(tmp_path, tensorboard=tmp_path / "tensorboard")


def test_smoothing_has_no_lag_and_stays_within_the_raw_range() -> None:
    line = [8.0 - 0.25 * i for i in range(30)]  # a short run whose loss falls fast
    assert smooth(line, half_width=5) == pytest.approx(line)  # a centered window passes a line through
    rng = random.Random(0)
    noisy = [v + rng.uniform(-0.3, 0.3) for v in line]
    smoothed = smooth(noisy, half_width=5)
    above = sum(s > v for s, v in zip(smoothed, noisy, strict=True))
    assert 5 < above < 25  # on the points, not above all of them as a trailing average would be
    assert min(noisy) <= min(smoothed) and max(smoothed) <= max(noisy)


def test_smoothing_is_a_moving_average_in_the_middle_and_shrinks_at_the_ends() -> None:
    import numpy as np

    rng = random.Random(1)
    values = [rng.gauss(3.0, 1.0) for _ in range(400)]
    smoothed = smooth(values)  # default: 400 // 20 = 20 points a side
    window = np.convolve(values, np.ones(41) / 41, mode="valid")  # an independent moving average
    assert smoothed[20:-20] == pytest.approx(window.tolist())
    assert smoothed[0] == pytest.approx(values[0]) and smoothed[1] == pytest.approx(sum(values[:3]) / 3)
    assert smooth(values[:19]) == pytest.approx(values[:19])  # too short to smooth


def test_damaged_rows_are_skipped_with_a_notice(tmp_path: Path) -> None:
    write_run(tmp_path, steps=10)
    good = read_metrics(tmp_path)
    with (tmp_path / "metrics.jsonl").open("ab") as f:
        f.write(b'{"step": 11, "loss": \xff\xfe}\n')  # bad bytes
        f.write(b'{"step": "twelve", "loss": 4.0}\n')  # wrong type
        f.write(b'{"step": 13, "loss": [4.0]}\n')
        f.write(b'[13, 4.0]\n')
        f.write(b'{"step": 14, "loss": "nan", "lr": 0.001}\n')  # a NaN loss as the logger writes it: kept
    notices: list[str] = []
    rows = read_metrics(tmp_path, say=notices.append)
    assert rows == [*good, {"step": 14, "loss": "nan", "lr": 0.001}]
    assert len(notices) == 1 and "skipped 4 damaged rows" in notices[0] and "line 12" in notices[0]
    truncate_after(tmp_path, 5)  # the resume path reads through the same checks
    assert max(r["step"] for r in read_metrics(tmp_path, say=notices.append)) == 5


def test_plot_skips_damaged_rows_with_a_notice(tmp_path: Path, capsys) -> None:
    write_run(tmp_path)
    with (tmp_path / "metrics.jsonl").open("ab") as f:
        f.write(b'{"step": 31, "loss": {"x": 1}}\n{"step": 32, "lo')
    assert plot_runs([tmp_path]).is_file()
    err = capsys.readouterr().err
    assert "skipped 1 damaged row: line 34" in err  # the torn last line is what a kill leaves: no notice


def test_plot_into_a_read_only_place_is_one_line_and_leaves_nothing(tmp_path: Path, monkeypatch) -> None:
    from matplotlib.figure import Figure

    def refuse(self, path, **kwargs) -> None:
        Path(path).write_bytes(b"half a png")  # a write that fails half-way ...
        raise OSError(errno.EROFS, os.strerror(errno.EROFS), str(path))  # ... because the disk refuses the rest

    write_run(tmp_path)
    monkeypatch.setattr(Figure, "savefig", refuse)
    with pytest.raises(TinyLMError, match="cannot write the plot .*loss.png: Read-only file system"):
        plot_runs([tmp_path])
    assert sorted(p.name for p in tmp_path.iterdir()) == ["metrics.jsonl"]


class FakeTerminal(io.StringIO):
    def isatty(self) -> bool:
        return True


def test_progress_without_a_terminal_is_a_line_per_tenth_of_the_run() -> None:
    log = io.StringIO()
    progress = Progress(100, stream=log)
    for step in range(1, 101):
        progress.update(step, 5.0 - step / 100, 1e-3, 2000.0, None)
    progress.close()
    lines = log.getvalue().splitlines()
    assert len(lines) == 10 and lines[0].startswith("train: step 10/100 (10%) loss 4.9000")
    assert lines[-1].startswith("train: step 100/100 (100%)") and "\r" not in log.getvalue()
    quiet = io.StringIO()
    Progress(100, stream=quiet, enabled=False).update(100, 1.0, 1e-3, 1.0, None)
    assert quiet.getvalue() == ""


def test_progress_on_a_terminal_is_a_bar() -> None:
    terminal = FakeTerminal()
    progress = Progress(10, stream=terminal)
    progress.update(5, 4.0, 1e-3, 1000.0, 0.1)
    progress.close()
    assert "\r" in terminal.getvalue() and "train:" in terminal.getvalue() and "MFU 10.0%" in terminal.getvalue()


def test_progress_of_a_run_ended_by_time_reports_by_the_clock() -> None:
    log = io.StringIO()
    progress = Progress(10**9, stream=log, every_s=0.0)  # a time-budget run: the step count says nothing
    progress.update(1, 4.0, 1e-3, 1000.0, None)
    progress.update(2, 3.9, 1e-3, 1000.0, None)
    assert len(log.getvalue().splitlines()) == 2


def test_plot_writes_a_png(tmp_path: Path) -> None:
    write_run(tmp_path / "a")
    write_run(tmp_path / "b", steps=20)
    single = plot_runs([tmp_path / "a"])
    assert single == tmp_path / "a" / "loss.png"
    assert single.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    both = plot_runs([tmp_path / "a", tmp_path / "b"], tmp_path / "both.png", title="a vs b")
    assert both.stat().st_size > 1000 and not list(tmp_path.glob("*.tmp"))
    (tmp_path / "empty").mkdir()
    (tmp_path / "empty" / "metrics.jsonl").write_text("")
    with pytest.raises(TinyLMError, match="nothing to plot"):
        plot_runs([tmp_path / "empty"])


def test_sampling_is_seeded_greedy_and_stops() -> None:
    torch.manual_seed(0)
    model = build_model(preset_config("tiny", "modern", vocab_size=64, context_length=8, n_embed=32, n_head=2,
                                      n_blocks=1, n_kv_head=1))
    a = sample_ids(model, [1, 2, 3], 20, temperature=1.0, top_k=5, seed=3)
    assert a == sample_ids(model, [1, 2, 3], 20, temperature=1.0, top_k=5, seed=3)
    assert len(a) == 20  # longer than the context: the window slides
    greedy = sample_ids(model, [1, 2, 3], 5, temperature=0)
    logits, _ = model(torch.tensor([[1, 2, 3]]))
    assert greedy[0] == int(logits[0, -1].argmax())
    first = sample_ids(model, [1, 2, 3], 50, temperature=0, stop_id=greedy[0])
    assert first == [greedy[0]]
    assert model.training  # the caller's mode is restored


def test_oom_message_lists_memory_flags() -> None:
    assert is_oom(torch.OutOfMemoryError("CUDA out of memory. Tried to allocate 2 GiB"))
    assert is_oom(RuntimeError("DefaultCPUAllocator: not enough memory: you tried to allocate 8 GB"))
    assert is_oom(RuntimeError("[enforce fail at alloc_cpu.cpp:127] err == 0. DefaultCPUAllocator: can't allocate "
                               "memory: you tried to allocate 8 bytes. Error code 12 (Cannot allocate memory)"))
    assert not is_oom(RuntimeError("shape mismatch"))
    msg = oom_message(32, 1, 1024, "auto", False, False, 8, "cuda")
    for flag in ("--batch-size 16 --grad-accum 2", "--gradient-checkpointing", "--dtype bf16", "--seq-len 512",
                 "--fsdp"):
        assert flag in msg
    assert "\n" not in msg


def test_sample_text_with_a_real_tokenizer() -> None:
    from test_train_support import VOCAB, data_dir
    from tinylm.stages.pretrain.sample import sample_text
    from tinylm.tokenizer import load_tokenizer

    tokenizer = load_tokenizer(data_dir() / "tokenizer.json")
    torch.manual_seed(0)
    model = build_model(preset_config("tiny", "modern", vocab_size=VOCAB, context_length=16, n_embed=32, n_head=2,
                                      n_blocks=1, n_kv_head=1))
    text = sample_text(model, tokenizer, "def", 10, seed=1)
    assert text.startswith("def") and len(text) > 3
    assert text == sample_text(model, tokenizer, "def", 10, seed=1)
    fresh = sample_text(model, tokenizer, "", 10, seed=1)  # empty prompt: a new document, EOT not shown
    assert isinstance(fresh, str) and "<|endoftext|>" not in fresh
