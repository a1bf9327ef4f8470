"""metrics.jsonl writing/reading/truncation, the loss plot, the sample helper and the OOM/NaN messages."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import torch

from tinylm.errors import TinyLMError
from tinylm.models.factory import build_model
from tinylm.presets import preset_config
from tinylm.train.faults import is_oom, oom_message
from tinylm.train.metrics import MetricsLogger, read_metrics, truncate_after
from tinylm.train.plot import ema, plot_runs
from tinylm.train.sample import sample_ids

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


def test_optional_loggers_need_their_packages(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    import builtins

    real_import = builtins.__import__

    def no_wandb(name: str, *args: object, **kwargs: object) -> object:
        if name == "wandb":
            raise ImportError(name)
        return real_import(name, *args, **kwargs)

    monkeypatch.setattr(builtins, "__import__", no_wandb)
    with pytest.raises(TinyLMError, match="pip install wandb"):
        MetricsLogger(tmp_path, wandb=True)


def test_ema_is_bias_corrected() -> None:
    assert ema([4.0, 4.0, 4.0]) == pytest.approx([4.0, 4.0, 4.0])
    assert ema([0.0, 10.0], beta=0.5) == pytest.approx([0.0, 10.0 * 0.5 / 0.75])


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
    assert not is_oom(RuntimeError("shape mismatch"))
    msg = oom_message(32, 1, 1024, "auto", False, False, 8, "cuda")
    for flag in ("--batch-size 16 --grad-accum 2", "--gradient-checkpointing", "--dtype bf16", "--seq-len 512",
                 "--fsdp"):
        assert flag in msg
    assert "\n" not in msg


def test_sample_text_with_a_real_tokenizer() -> None:
    from test_train_support import VOCAB, data_dir
    from tinylm.tokenizer import load_tokenizer
    from tinylm.train.sample import sample_text

    tokenizer = load_tokenizer(data_dir() / "tokenizer.json")
    torch.manual_seed(0)
    model = build_model(preset_config("tiny", "modern", vocab_size=VOCAB, context_length=16, n_embed=32, n_head=2,
                                      n_blocks=1, n_kv_head=1))
    text = sample_text(model, tokenizer, "def", 10, seed=1)
    assert text.startswith("def") and len(text) > 3
    assert text == sample_text(model, tokenizer, "def", 10, seed=1)
    fresh = sample_text(model, tokenizer, "", 10, seed=1)  # empty prompt: a new document, EOT not shown
    assert isinstance(fresh, str) and "<|endoftext|>" not in fresh
