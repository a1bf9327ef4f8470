"""The training loop end to end on a micro model and real (tiny) shards: outputs, budgets, resume, faults."""

from __future__ import annotations

import math
import os
import signal
import time
from pathlib import Path
from typing import Any

import pytest
import torch

from test_train_support import MICRO, config, data_dir, hooked_build_model, losses, rows
from tinylm.checkpoint import list_checkpoints, load_model, load_train_state
from tinylm.errors import TinyLMError
from tinylm.metrics import read_samples
from tinylm.stages.pretrain import pretrain
from tinylm.stages.pretrain import stage as pretrain_stage
from tinylm.train.schedule import LRSchedule


def training_calls(every: int, action: Any) -> Any:
    """A forward hook that runs `action(output, n)` on the n-th training forward (1-based) when n % every == 0."""
    count = [0]

    def hook(module: torch.nn.Module, args: Any, output: Any) -> Any:
        if not module.training:
            return None
        count[0] += 1
        return action(output, count[0]) if count[0] % every == 0 else None

    return hook


def test_a_run_logs_evaluates_checkpoints_plots_and_samples(tmp_path: Path) -> None:
    out = tmp_path / "run"
    summary = pretrain(config(out, max_steps=6, eval_every=3, sample_tokens=12, prompt="def"))
    assert summary.steps == 6 and summary.stopped == "max_steps" and summary.tokens == 6 * 4 * 16
    logged = rows(out)
    train = [r for r in logged if "loss" in r]
    assert [r["step"] for r in train] == [1, 2, 3, 4, 5, 6]
    for r in train:
        assert {"step", "loss", "lr", "tokens_per_s", "mfu", "grad_norm"} <= set(r)
        assert r["tokens_per_s"] > 0 and math.isfinite(r["loss"])
    evals = [r for r in logged if "dev_loss" in r]
    assert [r["step"] for r in evals] == [3, 6]
    import json

    dev = json.loads((data_dir() / "dev.json").read_text())
    for r in evals:  # bits per byte from the dev shard's own token and byte counts
        assert r["dev_bpb"] == pytest.approx(r["dev_loss"] * dev["tokens"] / (dev["bytes"] * math.log(2)))
    assert summary.dev_loss == evals[-1]["dev_loss"] and summary.final_loss == train[-1]["loss"]
    assert train[-1]["loss"] < train[0]["loss"]
    assert (out / "loss.png").read_bytes()[:4] == b"\x89PNG"
    assert [p.name for p in list_checkpoints(out)] == ["step_00000006"]
    model, tokenizer, meta = load_model(out)
    assert tokenizer is not None and meta["step"] == 6 and meta["tokens"] == 384
    assert model.config.n_embed == MICRO["n_embed"]
    assert summary.sample is not None and summary.sample.startswith("def") and len(summary.sample) > 3
    # the final sample is kept in samples.jsonl for the studio's run page: the prompt, and what followed it
    assert read_samples(out) == [{"step": 6, "prompt": "def", "reply": summary.sample.removeprefix("def")}]
    assert summary.params == model.num_params() and summary.run_dir == str(out)



def test_each_printed_line_measures_its_own_tokens_per_second(tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                                              capsys: pytest.CaptureFixture[str]) -> None:
    """A 10-step run logs metrics every 10 steps but prints a line per step: no line repeats a figure an earlier
    line showed (each step here takes longer than the one before, so every interval has its own rate)."""
    from types import SimpleNamespace

    from tinylm.train import loop

    calls = [0, 0.0]

    def perf_counter() -> float:  # the n-th reading is n x 10 ms after the one before
        calls[0] += 1
        calls[1] += calls[0] * 0.01
        return calls[1]

    monkeypatch.setattr(loop, "time", SimpleNamespace(perf_counter=perf_counter))
    pretrain(config(tmp_path, max_steps=10, log_every=10, progress=True))
    lines = [line for line in capsys.readouterr().err.splitlines() if line.startswith("train: step")]
    rates = [line.split(" lr ")[1].split()[1] for line in lines]
    assert len(lines) == 10 and all(a != b for a, b in zip(rates, rates[1:])), lines
    logged = [r["tokens_per_s"] for r in rows(tmp_path) if "loss" in r]
    assert len(logged) == 2  # metrics.jsonl keeps its own window: the first step, then steps 2-10


@pytest.mark.parametrize("optimizer", ["adamw", "muon"])
def test_exact_resume_with_dropout(tmp_path: Path, optimizer: str) -> None:
    """Stop at 4 of 8 steps, resume: losses 5..8 are bit-identical to an uninterrupted run.

    Dropout makes the RNG state matter and the random batches make the loader position matter.
    """
    kw = dict(overrides={**MICRO, "dropout": 0.1}, schedule_steps=8, optimizer=optimizer)
    pretrain(config(tmp_path / "straight", max_steps=8, **kw))
    first = pretrain(config(tmp_path / "resumed", max_steps=4, **kw))
    assert first.steps == 4
    second = pretrain(config(tmp_path / "resumed", max_steps=8, resume="latest", **kw))
    assert second.steps == 8  # --max-steps is a total: 4 more steps
    assert losses(tmp_path / "resumed") == losses(tmp_path / "straight")
    assert [r["step"] for r in rows(tmp_path / "resumed") if "loss" in r] == list(range(1, 9))


def test_schedule_length_is_schedule_steps_not_max_steps(tmp_path: Path) -> None:
    pretrain(config(tmp_path, max_steps=4, schedule_steps=8, schedule="linear", warmup_steps=0, lr=0.01,
                        min_lr_ratio=0.0, optimizer="adamw"))  # the logged lr is the first group's: AdamW's
    expected = [0.01 * LRSchedule("linear", 8, 0, 0.0).factor(i) for i in range(4)]
    assert [r["lr"] for r in rows(tmp_path) if "lr" in r] == pytest.approx(expected)
    assert expected[-1] == pytest.approx(0.01 * (1 - 3 / 7))


def test_max_tokens_stops_at_the_first_step_past_it(tmp_path: Path) -> None:
    summary = pretrain(config(tmp_path, max_steps=100, max_tokens=200))  # 64 tokens per step
    assert summary.stopped == "max_tokens" and summary.steps == 4 and summary.tokens == 256
    state = load_train_state(list_checkpoints(tmp_path)[-1])
    assert state["tokens"] == 256 and state["schedule"]["total"] == 4  # the schedule fits the token budget


def test_grad_accum_counts_tokens_per_optimizer_step(tmp_path: Path) -> None:
    summary = pretrain(config(tmp_path, max_steps=3, grad_accum=3))
    assert summary.tokens == 3 * 3 * 4 * 16
    assert load_train_state(list_checkpoints(tmp_path)[-1])["loader"]["step"] == 9  # 3 micro-batches a step


def test_time_budget_stops_cleanly_and_saves(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    slow = hooked_build_model(training_calls(1, lambda o, n: time.sleep(0.05)))
    monkeypatch.setattr(pretrain_stage, "build_model", slow)
    start = time.perf_counter()
    summary = pretrain(config(tmp_path, max_steps=10_000, time_budget=0.6))
    elapsed = time.perf_counter() - start
    assert summary.stopped == "time_budget"
    assert 3 <= summary.steps <= 13, summary.steps
    assert elapsed < 10
    assert list_checkpoints(tmp_path)[-1].name == f"step_{summary.steps:08d}"
    last = [r for r in rows(tmp_path) if "loss" in r][-1]
    assert last["elapsed_s"] <= 0.6 + 0.1  # it stops before overrunning, not after


def test_nan_loss_stops_and_keeps_the_last_good_checkpoint(tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                                          capsys: pytest.CaptureFixture[str]) -> None:
    def poison(output: Any, n: int) -> Any:
        logits, loss = output
        return (logits, loss * float("nan")) if n == 5 else None

    monkeypatch.setattr(pretrain_stage, "build_model", hooked_build_model(training_calls(1, poison)))
    summary = pretrain(config(tmp_path, max_steps=10, checkpoint_every=2))
    assert summary.stopped == "nan" and summary.steps == 4
    assert [p.name for p in list_checkpoints(tmp_path)] == ["step_00000002", "step_00000004"]
    assert summary.checkpoint == str(list_checkpoints(tmp_path)[-1])
    err = capsys.readouterr().err
    assert "loss is nan at step 5" in err and "step_00000004" in err
    model, _, _ = load_model(tmp_path)
    assert all(torch.isfinite(p).all() for p in model.parameters())


def test_ctrl_c_saves_and_resumes_exactly(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    pretrain(config(tmp_path / "straight", max_steps=6))

    def interrupt(output: Any, n: int) -> None:
        if n == 3:
            os.kill(os.getpid(), signal.SIGINT)  # delivered mid-step, as a real Ctrl-C would be

    handler_before = signal.getsignal(signal.SIGINT)  # SIG_IGN when pytest runs as a background job
    with monkeypatch.context() as m:
        m.setattr(pretrain_stage, "build_model", hooked_build_model(training_calls(1, interrupt)))
        summary = pretrain(config(tmp_path / "stopped", max_steps=6))
    assert summary.stopped == "interrupted" and summary.steps == 3
    assert list_checkpoints(tmp_path / "stopped")[-1].name == "step_00000003"
    assert signal.getsignal(signal.SIGINT) is handler_before  # handler restored
    pretrain(config(tmp_path / "stopped", max_steps=6, resume="latest"))
    assert losses(tmp_path / "stopped") == losses(tmp_path / "straight")


def test_out_of_memory_names_the_flags_that_help(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    def oom(output: Any, n: int) -> None:
        raise torch.OutOfMemoryError("CUDA out of memory. Tried to allocate 20.00 GiB")

    monkeypatch.setattr(pretrain_stage, "build_model", hooked_build_model(training_calls(1, oom)))
    with pytest.raises(TinyLMError, match="out of memory") as err:
        pretrain(config(tmp_path, batch_size=8))
    assert "--batch-size 4 --grad-accum 2" in str(err.value) and "--gradient-checkpointing" in str(err.value)


def test_bad_data_is_refused_before_the_model_is_built(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    def never(*args: Any) -> None:
        raise AssertionError("the model was built before the data was checked")

    monkeypatch.setattr(pretrain_stage, "build_model", never)
    with pytest.raises(TinyLMError, match="vocab_size"):
        pretrain(config(tmp_path, overrides={**MICRO, "vocab_size": 64}))
    with pytest.raises(TinyLMError, match="data folder not found"):
        pretrain(config(tmp_path, data=str(tmp_path / "missing")))


def test_resume_refuses_another_model_naming_fields(tmp_path: Path) -> None:
    pretrain(config(tmp_path, max_steps=2))
    with pytest.raises(TinyLMError, match=r"n_blocks \(checkpoint 1, requested 2\)"):
        pretrain(config(tmp_path, max_steps=4, resume="latest", overrides={**MICRO, "n_blocks": 2}))


def test_out_folder_rules(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    pretrain(config(tmp_path / "a", max_steps=1))
    with pytest.raises(TinyLMError, match="already has checkpoints"):
        pretrain(config(tmp_path / "a", max_steps=2))
    fresh = pretrain(config(tmp_path / "b", max_steps=1, resume="latest"))  # nothing to resume: starts
    assert fresh.steps == 1
    done = pretrain(config(tmp_path / "a", max_steps=1, resume="latest"))  # already there: no new step
    assert done.steps == 1 and done.checkpoint == str(list_checkpoints(tmp_path / "a")[-1])
    monkeypatch.chdir(tmp_path)
    first = pretrain(config(None, max_steps=1))
    second = pretrain(config(None, max_steps=1))
    assert (first.run_dir, second.run_dir) == ("runs/tiny-modern", "runs/tiny-modern-2")
    again = pretrain(config(None, max_steps=2, resume="latest"))
    assert again.run_dir == "runs/tiny-modern-2" and again.steps == 2


def test_default_data_is_prepared_once_with_the_model_vocab(monkeypatch: pytest.MonkeyPatch) -> None:
    import tinylm.data.prepare as prepare
    from tinylm.presets import preset_config
    from tinylm.runtime.distributed import DistEnv
    from tinylm.stages.pretrain.data import resolve_data_dir

    calls: list[dict[str, Any]] = []
    prepared = data_dir()  # before the patch: data_dir() itself prepares through prepare_dataset

    def fake_prepare(**kw: Any) -> Path:
        calls.append(kw)
        return prepared

    monkeypatch.setattr(prepare, "prepare_dataset", fake_prepare)
    model = preset_config("tiny", "modern", vocab_size=300)
    assert resolve_data_dir(None, model, DistEnv(), progress=False) == prepared
    assert calls[0]["corpus"] == "pystdlib" and calls[0]["tokenizer"] == "bpe" and calls[0]["vocab_size"] == 300
    resolve_data_dir(None, preset_config("13m", "classic"), DistEnv(), progress=False)
    assert calls[1]["tokenizer"] == "r50k" and calls[1]["vocab_size"] == 50304  # GPT-2's tokenizer for 50k vocabs
    assert len(calls) == 2


def test_gradient_checkpointing_changes_memory_not_results(tmp_path: Path) -> None:
    pretrain(config(tmp_path / "plain", max_steps=3))
    summary = pretrain(config(tmp_path / "ckpt", max_steps=3, gradient_checkpointing=True))
    assert losses(tmp_path / "ckpt") == pytest.approx(losses(tmp_path / "plain"), abs=1e-6)
    model, _, meta = load_model(summary.checkpoint)
    assert meta["model"]["gradient_checkpointing"] is True


def test_bf16_autocast_on_cpu_trains(tmp_path: Path) -> None:
    summary = pretrain(config(tmp_path, max_steps=4, dtype="bf16", lr=1e-2, eval_every=4))
    bf16 = losses(tmp_path)
    assert all(math.isfinite(x) for x in bf16) and bf16[-1] < bf16[0]
    assert summary.dev_loss is not None and math.isfinite(summary.dev_loss)


@pytest.mark.slow
def test_torch_compile_matches_eager(tmp_path: Path) -> None:
    pretrain(config(tmp_path / "eager", max_steps=4))
    pretrain(config(tmp_path / "compiled", max_steps=4, compile=True))
    assert losses(tmp_path / "compiled") == pytest.approx(losses(tmp_path / "eager"), abs=1e-5)


def test_z_loss_is_in_the_training_loss_and_never_in_the_dev_loss(tmp_path: Path) -> None:
    """--z-loss reaches pretraining's loss: step 1's logged loss is CE + Z * mean(logsumexp^2) of the same
    initial weights and batch, so it exceeds the plain run's by that term (~0.33 here); the dev loss after
    that one step differs only by the step's slightly different update (evaluation is plain cross-entropy). AdamW
    at 3e-3: the small step the bound below was set for (Muon's is as large whatever the gradient)."""
    plain, with_z = tmp_path / "plain", tmp_path / "z"
    pretrain(config(plain, max_steps=1, eval_every=1, optimizer="adamw"))
    pretrain(config(with_z, max_steps=1, eval_every=1, z_loss=0.01, optimizer="adamw"))
    logged = {run: rows(run) for run in (plain, with_z)}
    step1 = {run: next(r["loss"] for r in logged[run] if "loss" in r) for run in logged}
    # logsumexp of near-uniform initial logits over 300 tokens is about log(300) = 5.7: the term is ~0.33
    term = 0.01 * math.log(300) ** 2
    assert step1[with_z] - step1[plain] == pytest.approx(term, rel=0.05)
    dev = {run: next(r["dev_loss"] for r in logged[run] if "dev_loss" in r) for run in logged}
    assert abs(dev[with_z] - dev[plain]) < term / 30


def test_a_relative_data_folder_is_recorded_absolute(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A run trained with `--data data` from one folder is evaluated from any other: its lineage must not say
    "data" and leave the reader to guess where that was."""
    from tinylm.evaluate.bpb import pretraining_data

    monkeypatch.chdir(data_dir().parent)
    pretrain(config(tmp_path / "run", data=data_dir().name, max_steps=1))
    monkeypatch.chdir(tmp_path)
    _, _, meta = load_model(tmp_path / "run")
    assert pretraining_data(meta) == data_dir() and Path(meta["lineage"][0]["data"]).is_absolute()
