"""`--compile auto|on|off`: the payback rule, the probe cache, and compiled blocks that compute what eager ones do."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch

from test_train_support import MICRO as TRAIN_MICRO
from test_train_support import config, losses
from tinylm.config import ModelConfig
from tinylm.errors import TinyLMError
from tinylm.models.factory import build_model
from tinylm.models.loss import _COMPILED_HEADS
from tinylm.runtime import compile_policy, measure_cache
from tinylm.runtime.compile_policy import CompileMeasurement, compile_blocks, decide, eager_blocks, plan_compile
from tinylm.stages.pretrain import pretrain

CPU = torch.device("cpu")
MICRO = ModelConfig(arch="modern", vocab_size=256, context_length=32, n_embed=32, n_head=2, n_kv_head=1, n_blocks=2,
                    tie_embeddings=True)
SHAPE = dict(model_config=MICRO, batch_size=4, seq_len=16, dtype=torch.float32, device=CPU)


def test_compile_pays_back_when_the_saved_time_exceeds_the_compile_time() -> None:
    # 30 s to compile; each of 2 blocks saves 0.05 s per step -> 0.1 s/step; with the 1.2 margin: 360 steps
    probe = CompileMeasurement(compile_s=30.0, eager_s=0.1, compiled_s=0.05)
    long_run = decide(probe, planned_steps=400, n_blocks=2, cached=True)
    assert long_run.value and "pays back after 360 steps" in long_run.reason and "2.00x" in long_run.reason
    short_run = decide(probe, planned_steps=300, n_blocks=2, cached=False)
    assert not short_run.value and "plans only 300" in short_run.reason and "probed now" in short_run.reason
    slower = decide(CompileMeasurement(5.0, 0.1, 0.12), planned_steps=10**9, n_blocks=8, cached=True)
    assert not slower.value and "no gain" in slower.reason


def test_each_shape_a_run_compiles_costs_the_compile_time_again() -> None:
    """A sequence warmup's two shorter row lengths are two more static compiles (30 s each here)."""
    probe = CompileMeasurement(compile_s=30.0, eager_s=0.1, compiled_s=0.05)
    three = decide(probe, planned_steps=1000, n_blocks=2, cached=True, shapes=3)
    assert not three.value and "compile 30 s x 3 shapes" in three.reason
    assert "pays back after 1,080 steps" in three.reason
    assert decide(probe, planned_steps=1080, n_blocks=2, cached=True, shapes=3).value


def test_static_blocks_compile_each_shape_once_and_dynamic_ones_go_symbolic(one_thread: None) -> None:
    """dynamic=False (pretraining, whose batch plan knows its shapes): one graph per row length, reused when it
    comes back; torch's default turns symbolic at the second shape (the 155 s recompile of the demo's warmup)."""
    import torch._dynamo

    def graphs_after_each(dynamic: bool | None) -> list[int]:
        torch._dynamo.reset()
        torch._dynamo.utils.counters.clear()
        torch.manual_seed(0)
        model = build_model(MICRO)
        compile_blocks(model, backend="aot_eager", dynamic=dynamic)
        seen = []
        for rows, length in [(2, 16), (4, 8), (8, 4), (2, 16)]:  # a warmup's shapes, then the first again
            x = torch.randint(0, MICRO.vocab_size, (rows, length))
            model(x, x, return_logits=False)[1].backward()
            seen.append(torch._dynamo.utils.counters["stats"]["unique_graphs"])
        return [b - a for a, b in zip(seen, seen[1:])]

    assert graphs_after_each(False) == [1, 1, 0]
    assert graphs_after_each(None) == [1, 0, 0]


def test_pretraining_compiles_static_blocks_and_other_stages_keep_torchs_default(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    from test_sft import sft_config
    from tinylm.stages.sft.stage import SFTStage
    from tinylm.train import run_setup
    from tinylm.train.loop import run_training

    asked: list[bool | None] = []
    monkeypatch.setattr(compile_policy, "have_compiler", lambda: True)
    monkeypatch.setattr(run_setup, "compile_blocks", lambda model, dynamic=None: asked.append(dynamic))
    pretrain(config(tmp_path / "pretrain", max_steps=1, compile="on"))
    run_training(sft_config(tmp_path / "sft", max_steps=1, compile="on"), stage=SFTStage())
    assert asked == [False, None]


def test_on_and_off_are_obeyed_and_unknown_modes_refused(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(compile_policy, "measure_compile", lambda *a, **k: pytest.fail("on/off probed"))
    assert plan_compile("on", 10, None, **SHAPE).value
    assert not plan_compile("off", 10**9, 1.0, **SHAPE).value
    with pytest.raises(TinyLMError, match="unknown --compile 'fast'"):
        plan_compile("fast", 10, None, **SHAPE)


def test_without_a_compiler_auto_stays_eager_and_on_is_an_error(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(compile_policy, "have_compiler", lambda: False)
    choice = plan_compile("auto", 10**6, 1.0, **SHAPE)
    assert not choice.value and "C++ compiler" in choice.reason
    with pytest.raises(TinyLMError, match="needs a C\\+\\+ compiler"):
        plan_compile("on", 10, None, **SHAPE)


def test_auto_probes_only_long_runs_and_caches_the_probe(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(compile_policy, "have_compiler", lambda: True)
    monkeypatch.setattr(measure_cache, "machine_busy", lambda: False)
    probes: list[bool] = []
    kernels: list[str] = []

    def fake_probe(config, batch_size, seq_len, dtype, device, compiled=True, attention="sdpa") -> CompileMeasurement:
        probes.append(compiled)
        kernels.append(attention)
        return CompileMeasurement(20.0, 0.2, 0.1) if compiled else CompileMeasurement(0.0, 0.2, 0.2)

    monkeypatch.setattr(compile_policy, "measure_compile", fake_probe)
    short = plan_compile("auto", 600, None, **SHAPE)  # eager estimate: 600 x 0.2 x 2 blocks = 4 min
    assert not short.value and "too short" in short.reason and probes == [False]  # timed eager, never compiled
    long = plan_compile("auto", 20_000, 0.5, **SHAPE)  # ~2.8 h: worth a probe; 0.2 s saved per step
    assert long.value and "probed now" in long.reason and probes == [False, True]
    cached = plan_compile("auto", 100, 0.5, **SHAPE)  # the cached probe decides, without probing again
    assert not cached.value and "(cached)" in cached.reason and probes == [False, True]
    budgeted = plan_compile("auto", 20_000, 0.5, time_budget_s=30.0, **SHAPE)  # 60 steps fit; 120 pay back
    assert not budgeted.value and "plans only 60" in budgeted.reason and probes == [False, True]
    blockwise = plan_compile("auto", 20_000, 0.5, attention="blockwise", **SHAPE)  # another kernel, another probe
    assert blockwise.value and "probed now" in blockwise.reason and kernels == ["sdpa", "sdpa", "blockwise"]


def test_a_gain_within_the_noise_is_no_gain() -> None:
    """A 1.05x compiled step with a spread of 0.08 may be no faster at all: eager, however long the run."""
    close = CompileMeasurement(compile_s=30.0, eager_s=0.105, compiled_s=0.1, spread=0.08)
    choice = decide(close, planned_steps=10**9, n_blocks=8, cached=False)
    assert not choice.value and "1.05x of eager, within the noise (±0.08)" in choice.reason
    # clear of the noise, the saving counts at the low end of the speedup: 2.0 - 0.5 = 1.5x, 1/3 of eager saved
    clear = decide(CompileMeasurement(30.0, 0.3, 0.15, spread=0.5), planned_steps=10**6, n_blocks=2, cached=True)
    assert clear.value and "pays back after 180 steps" in clear.reason and "(±0.50)" in clear.reason


def test_probes_on_a_busy_machine_are_kept_and_a_short_runs_estimate_too(monkeypatch: pytest.MonkeyPatch) -> None:
    """Measured anew each time, a run near the probe's threshold could probe (and compile) one time and not the next."""
    monkeypatch.setattr(compile_policy, "have_compiler", lambda: True)
    monkeypatch.setattr(measure_cache, "machine_busy", lambda: True)
    probes: list[bool] = []

    def fake_probe(config, batch_size, seq_len, dtype, device, compiled=True, attention="sdpa") -> CompileMeasurement:
        probes.append(compiled)
        return CompileMeasurement(20.0, 0.2, 0.1, 0.01) if compiled else CompileMeasurement(0.0, 0.2, 0.2)

    monkeypatch.setattr(compile_policy, "measure_compile", fake_probe)
    first = plan_compile("auto", 600, None, **SHAPE)
    again = plan_compile("auto", 600, None, **SHAPE)
    assert first == again and not again.value and probes == [False]  # the eager estimate was kept
    assert plan_compile("auto", 20_000, 0.5, **SHAPE).value and probes == [False, True]
    cached = plan_compile("auto", 20_000, 0.5, **SHAPE)
    assert cached.value and "(cached)" in cached.reason and probes == [False, True]


def _loss_and_grads(model: torch.nn.Module, x: torch.Tensor) -> tuple[torch.Tensor, list[torch.Tensor]]:
    _, loss = model(x, x, return_logits=False)
    loss.backward()
    return loss.detach(), [p.grad.clone() for p in model.parameters()]


@pytest.mark.parametrize("checkpointing", [False, True])
def test_compiled_blocks_trace_to_the_eager_result(one_thread: None, checkpointing: bool) -> None:
    """Fast smoke test: dynamo + AOT autograd without code generation (backend aot_eager)."""
    import torch._dynamo

    torch._dynamo.reset()
    cfg = MICRO.replace(gradient_checkpointing=checkpointing)
    torch.manual_seed(0)
    eager, compiled = build_model(cfg), build_model(cfg)
    compiled.load_state_dict(eager.state_dict())
    keys = list(compiled.state_dict())
    compile_blocks(compiled, backend="aot_eager")
    assert list(compiled.state_dict()) == keys  # in place: checkpoints load with or without compile
    assert compiled.lm_head in _COMPILED_HEADS and eager.lm_head not in _COMPILED_HEADS  # the loss's softmax too
    x = torch.randint(0, cfg.vocab_size, (2, 16), generator=torch.Generator().manual_seed(1))
    loss, grads = _loss_and_grads(eager, x)
    compiled_loss, compiled_grads = _loss_and_grads(compiled, x)
    torch.testing.assert_close(compiled_loss, loss)
    for a, b in zip(compiled_grads, grads, strict=True):
        torch.testing.assert_close(a, b, rtol=1e-5, atol=1e-6)
    graphs = torch._dynamo.utils.counters["stats"]["unique_graphs"]
    with torch.no_grad(), eager_blocks():  # decoding shapes: run eagerly, compile nothing new
        compiled(x[:, :5])
    assert torch._dynamo.utils.counters["stats"]["unique_graphs"] == graphs


@pytest.mark.slow
def test_inductor_blocks_match_eager_in_training(tmp_path: Path) -> None:
    """Real code generation: accumulation + gradient checkpointing, compiled vs eager losses agree."""
    kw = dict(max_steps=4, grad_accum=2, gradient_checkpointing=True, overrides=dict(TRAIN_MICRO))
    pretrain(config(tmp_path / "eager", **kw))
    pretrain(config(tmp_path / "compiled", compile="on", **kw))
    assert losses(tmp_path / "compiled") == pytest.approx(losses(tmp_path / "eager"), rel=1e-4)


@pytest.mark.slow
def test_compiled_exact_resume(tmp_path: Path) -> None:
    """Stop a compiled run at 3 of 6 steps and resume it (compiling again): the same losses, bit for bit."""
    kw = dict(compile="on", schedule_steps=6, overrides={**TRAIN_MICRO, "dropout": 0.1})
    pretrain(config(tmp_path / "straight", max_steps=6, **kw))
    pretrain(config(tmp_path / "resumed", max_steps=3, **kw))
    pretrain(config(tmp_path / "resumed", max_steps=6, resume="latest", **kw))
    assert losses(tmp_path / "resumed") == losses(tmp_path / "straight")
