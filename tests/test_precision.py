"""`--dtype auto` on a CPU (native bf16 + calibration, cached) and bf16 weights for decoding."""

from __future__ import annotations

import copy
from pathlib import Path

import pytest
import torch

from tinylm.config import ModelConfig
from tinylm.errors import TinyLMError
from tinylm.inference import decode_timing
from tinylm.inference.engine import Engine
from tinylm.inference.int8 import Int8Linear
from tinylm.inference.sampling import GREEDY
from tinylm.models.factory import build_model
from tinylm.runtime import decode_precision, measure_cache, precision

CPU = torch.device("cpu")
MACHINE_BUSY = measure_cache.machine_busy  # the real one, before the autouse fixture replaces it
MICRO = ModelConfig(arch="modern", vocab_size=256, context_length=32, n_embed=32, n_head=2, n_kv_head=1, n_blocks=2,
                    tie_embeddings=True)


class FakeCalibration:
    """Stands in for the timed calibration: returns a chosen ratio (and spread) and counts the calls."""

    def __init__(self, ratio: float, spread: float = 0.0) -> None:
        self.ratio, self.spread, self.calls = ratio, spread, 0

    def __call__(self, config: ModelConfig, rows: int, seq_len: int, repeats: int = 3) -> precision.Calibration:
        self.calls += 1
        return precision.Calibration(fp32_s=self.ratio * 0.01, bf16_s=0.01, ratio=self.ratio, wall_s=0.5,
                                     spread=self.spread)


@pytest.fixture(autouse=True)
def quiet_machine(monkeypatch: pytest.MonkeyPatch) -> None:
    """A reason says "machine busy" where it is; these tests run on a busy machine, so say it is quiet."""
    monkeypatch.setattr(measure_cache, "machine_busy", lambda: False)


@pytest.fixture
def bf16_cpu(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(precision, "native_bf16", lambda flags=None: "AVX512-BF16")


@pytest.mark.parametrize(("flags", "expected"), [
    ("fpu sse2 avx2 avx512f avx512bw amx_bf16 amx_tile avx512_bf16", "AMX-BF16"),
    ("fpu sse2 avx2 avx512f avx512bw avx512_bf16 avx512_vnni", "AVX512-BF16"),
    ("fp asimd evtstrm aes sve bf16 i8mm", "Arm BF16"),
    ("fpu sse2 avx2 avx512f avx512bw avx512_vnni", None),  # AVX-512 without bf16: emulated, slow
    ("", None),
])
def test_native_bf16_is_read_from_the_cpu_flags(flags: str, expected: str | None) -> None:
    assert precision.native_bf16(flags) == expected


def test_explicit_dtype_wins_without_calibrating(monkeypatch: pytest.MonkeyPatch, bf16_cpu: None) -> None:
    monkeypatch.setattr(precision, "calibrate", lambda *a, **k: pytest.fail("an explicit --dtype measured"))
    assert precision.choose_precision(CPU, "fp32", MICRO, 4, 16).value == torch.float32
    choice = precision.choose_precision(CPU, "bf16", MICRO, 4, 16)
    assert choice.value == torch.bfloat16 and "--dtype bf16" in choice.reason
    with pytest.raises(TinyLMError, match="fp16 needs a CUDA"):
        precision.choose_precision(CPU, "fp16", MICRO, 4, 16)
    with pytest.raises(TinyLMError, match="unknown dtype"):
        precision.choose_precision(CPU, "fp8", MICRO, 4, 16)


def test_gpu_keeps_the_datasheet_policy(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(torch.cuda, "is_bf16_supported", lambda: True)
    assert precision.choose_precision(torch.device("cuda"), "auto", MICRO, 4, 16).value == torch.bfloat16
    monkeypatch.setattr(torch.cuda, "is_bf16_supported", lambda: False)
    assert precision.choose_precision(torch.device("cuda"), "auto", MICRO, 4, 16).value == torch.float32


def test_a_cpu_without_native_bf16_stays_fp32_without_measuring(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(precision, "native_bf16", lambda flags=None: None)
    monkeypatch.setattr(precision, "calibrate", lambda *a, **k: pytest.fail("measured on a CPU without bf16"))
    choice = precision.choose_precision(CPU, "auto", MICRO, 4, 16)
    assert choice.value == torch.float32 and "no native bf16" in choice.reason


def test_auto_follows_the_calibration_and_caches_it(monkeypatch: pytest.MonkeyPatch, bf16_cpu: None) -> None:
    fast = FakeCalibration(1.5)
    monkeypatch.setattr(precision, "calibrate", fast)
    first = precision.choose_precision(CPU, "auto", MICRO, 4, 16)
    assert first.value == torch.bfloat16
    assert first.reason == ("bf16 autocast: AVX512-BF16, calibration 1.50x faster than fp32, ±0.00 "
                            "(measured now in 0.5 s)")
    again = precision.choose_precision(CPU, "auto", MICRO, 4, 16)
    assert again.value == torch.bfloat16 and again.reason.endswith("(cached)") and fast.calls == 1
    precision.choose_precision(CPU, "auto", MICRO.replace(n_embed=64), 4, 16)  # another shape class: measured
    assert fast.calls == 2
    precision.choose_precision(CPU, "auto", MICRO.replace(n_blocks=6), 4, 16)  # depth is not part of the shape
    assert fast.calls == 2

    slow = FakeCalibration(1.05)  # faster, but not by the margin
    monkeypatch.setattr(precision, "calibrate", slow)
    choice = precision.choose_precision(CPU, "auto", MICRO, 4, 32)
    assert choice.value == torch.float32 and "1.05x" in choice.reason and "1.15x" in choice.reason


def test_another_machine_measures_again(monkeypatch: pytest.MonkeyPatch, bf16_cpu: None) -> None:
    fake = FakeCalibration(2.0)
    monkeypatch.setattr(precision, "calibrate", fake)
    precision.choose_precision(CPU, "auto", MICRO, 4, 16)
    monkeypatch.setattr(measure_cache, "machine_key", lambda: "another CPU | flags 0 | 2 threads | torch x")
    precision.choose_precision(CPU, "auto", MICRO, 4, 16)
    assert fake.calls == 2


def test_busy_means_more_load_than_cores(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(measure_cache.os, "cpu_count", lambda: 2)
    monkeypatch.setattr(measure_cache.os, "getloadavg", lambda: (9.5, 7.9, 5.2))
    assert MACHINE_BUSY()
    monkeypatch.setattr(measure_cache.os, "getloadavg", lambda: (2.0, 2.0, 2.0))  # a 2-thread run of its own
    assert not MACHINE_BUSY()

    def unknown() -> tuple[float, float, float]:
        raise OSError("no load average here")

    monkeypatch.setattr(measure_cache.os, "getloadavg", unknown)
    assert not MACHINE_BUSY()


def test_a_calibration_on_a_busy_machine_is_kept_too(monkeypatch: pytest.MonkeyPatch, bf16_cpu: None) -> None:
    """Measuring again on every busy run costs seconds each time and may decide differently: decided once."""
    fake = FakeCalibration(2.0)
    monkeypatch.setattr(precision, "calibrate", fake)
    monkeypatch.setattr(measure_cache, "machine_busy", lambda: True)
    choice = precision.choose_precision(CPU, "auto", MICRO, 4, 16)
    assert choice.value == torch.bfloat16 and choice.reason.endswith("(measured now in 0.5 s, machine busy)")
    monkeypatch.setattr(precision, "calibrate", FakeCalibration(0.8))  # the next busy run would measure otherwise
    again = precision.choose_precision(CPU, "auto", MICRO, 4, 16)
    assert again.value == torch.bfloat16 and again.reason.endswith("(cached)") and fake.calls == 1
    assert again.measured == choice.measured and again.cached and not choice.cached


def test_a_close_call_falls_back_to_fp32_and_is_kept(monkeypatch: pytest.MonkeyPatch, bf16_cpu: None) -> None:
    """1.16x clears the 1.15x threshold, but not by the spread of its repeats: fp32, cached with that reason."""
    monkeypatch.setattr(precision, "calibrate", FakeCalibration(1.16, spread=0.05))
    choice = precision.choose_precision(CPU, "auto", MICRO, 4, 16)
    assert choice.value == torch.float32
    assert choice.reason == ("fp32: AVX512-BF16 present, bf16 autocast measured 1.16x of fp32, within the noise "
                             "(±0.05) of the 1.15x that pays (measured now in 0.5 s)")
    assert choice.measured == {"fp32_s": 1.16 * 0.01, "bf16_s": 0.01, "ratio": 1.16, "spread": 0.05}
    monkeypatch.setattr(precision, "calibrate", lambda *a, **k: pytest.fail("a kept decision measured again"))
    again = precision.choose_precision(CPU, "auto", MICRO, 4, 16)
    assert again.value == torch.float32 and again.reason == choice.reason.replace("(measured now in 0.5 s)",
                                                                                  "(cached)")
    monkeypatch.setattr(precision, "calibrate", FakeCalibration(1.25, spread=0.05))  # clear by more than the spread
    assert precision.choose_precision(CPU, "auto", MICRO, 4, 32).value == torch.bfloat16


def test_an_entry_of_the_old_kind_is_measured_again(monkeypatch: pytest.MonkeyPatch, bf16_cpu: None) -> None:
    """A cached ratio without its spread or decision (the 1.16x `make demo` read as bf16) is decided anew."""
    key = precision.shape_class(MICRO, 4, 16)
    measure_cache.store_entry("precision", key, {"fp32_s": 0.0116, "bf16_s": 0.01, "ratio": 1.16})
    fake = FakeCalibration(1.16, spread=0.05)
    monkeypatch.setattr(precision, "calibrate", fake)
    assert precision.choose_precision(CPU, "auto", MICRO, 4, 16).value == torch.float32 and fake.calls == 1


def test_an_unwritable_or_corrupt_cache_never_stops_a_run(monkeypatch: pytest.MonkeyPatch, tmp_path: Path,
                                                           bf16_cpu: None) -> None:
    blocker = tmp_path / "not-a-folder"
    blocker.write_text("x")
    monkeypatch.setattr(measure_cache, "cache_file", lambda kind: blocker / "cache" / f"{kind}.json")
    monkeypatch.setattr(precision, "calibrate", FakeCalibration(2.0))
    assert precision.choose_precision(CPU, "auto", MICRO, 4, 16).value == torch.bfloat16
    corrupt = tmp_path / "corrupt.json"
    corrupt.write_text("{not json")
    monkeypatch.setattr(measure_cache, "cache_file", lambda kind: corrupt)
    assert precision.choose_precision(CPU, "auto", MICRO, 4, 16).value == torch.bfloat16
    assert measure_cache.load_entry("precision", precision.shape_class(MICRO, 4, 16)) is not None  # rewritten


def test_calibration_times_both_precisions_and_leaves_the_rng_alone(one_thread: None) -> None:
    torch.manual_seed(5)
    expected = torch.rand(3)
    torch.manual_seed(5)
    result = precision.calibrate(MICRO, rows=2, seq_len=16, repeats=2)
    assert torch.equal(torch.rand(3), expected)
    assert result.fp32_s > 0 and result.bf16_s > 0 and result.ratio == result.fp32_s / result.bf16_s
    assert result.spread >= 0 and result.wall_s >= result.fp32_s + result.bf16_s


def test_calibration_rows_follow_the_batch_up_to_a_token_cap() -> None:
    assert precision.calibration_rows(4, 16) == 4
    assert precision.calibration_rows(64, 512) == precision.CALIBRATION_TOKENS // 512
    assert precision.calibration_rows(8, 4096) == 1


# ---- decoding -----------------------------------------------------------------------------------------

def successor(token: int) -> int:
    return (5 * token + 3) % 97


def trained_micro_model() -> torch.nn.Module:
    """A micro model fitted to a fixed next-token rule, so its greedy choices have clear margins
    (a random model's logits are near ties, which any rounding may flip)."""
    torch.manual_seed(0)
    model = build_model(MICRO)
    generator = torch.Generator().manual_seed(0)
    optimizer = torch.optim.AdamW(model.parameters(), lr=1e-2)
    for _ in range(50):
        rows = [torch.randint(0, 97, (16,), generator=generator)]
        for _ in range(MICRO.context_length):
            rows.append(successor(rows[-1]))
        batch = torch.stack(rows, dim=1)
        _, loss = model(batch[:, :-1], batch[:, 1:])
        loss.backward()
        optimizer.step()
        optimizer.zero_grad()
    return model.eval()


def test_bf16_decoding_keeps_logits_close_and_greedy_text_unchanged(one_thread: None) -> None:
    model = trained_micro_model()
    half = copy.deepcopy(model).to(torch.bfloat16)
    prompts = [[3], [10, successor(10)], [40, successor(40), successor(successor(40))]]
    with torch.no_grad():
        for prompt in prompts:
            ids = torch.tensor([prompt])
            full, low = model(ids)[0][0, -1], half(ids)[0][0, -1].float()
            error = (full - low).abs().max()
            assert error < 0.02 * full.abs().max() + 0.05  # bf16 keeps ~3 significant digits
            top2 = full.topk(2).values
            assert top2[0] - top2[1] > 4 * error  # a clear margin, so greedy decoding must agree
    fp32_text = Engine(model).generate(prompts, 20, GREEDY)
    assert fp32_text[0][:3] == [successor(3), successor(successor(3)), successor(successor(successor(3)))]
    assert Engine(half).generate(prompts, 20, GREEDY) == fp32_text


def decode_cast(model: torch.nn.Module) -> tuple[torch.nn.Module, str]:
    """The decode cast as `tinylm generate` runs it (the runtime's policy, the engine's timing): (model, reason)."""
    chosen, choice = decode_timing.cast_measuring_decode(model, CPU)
    return chosen, choice.reason


def test_cast_for_decoding_measures_once_and_keeps_bf16_only_if_faster(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(decode_precision, "native_bf16", lambda flags=None: "AVX512-BF16")
    model = build_model(MICRO).eval()
    same, reason = decode_cast(model)  # 0.1 MiB: stays in cache, not measured
    assert same is model and next(same.parameters()).dtype == torch.float32 and "stay in cache" in reason

    monkeypatch.setattr(decode_precision, "MIN_MEASURED_BYTES", 0)
    calls = []
    monkeypatch.setattr(decode_timing, "measure_decode_ratio", lambda a, b: calls.append(1) or timing(1.8))
    cast, reason = decode_cast(model)
    assert next(cast.parameters()).dtype == torch.bfloat16 and "1.80x faster" in reason and "measured now" in reason
    again, reason = decode_cast(build_model(MICRO).eval())
    assert next(again.parameters()).dtype == torch.bfloat16 and reason.endswith("(cached)") and len(calls) == 1

    monkeypatch.setattr(decode_timing, "measure_decode_ratio", lambda a, b: timing(0.7))
    other = build_model(MICRO.replace(n_embed=64, n_head=4)).eval()
    kept, reason = decode_cast(other)
    assert kept is other and next(kept.parameters()).dtype == torch.float32 and "0.70x" in reason

    monkeypatch.setattr(decode_timing, "measure_decode_ratio", lambda a, b: timing(1.12, spread=0.04))
    close = build_model(MICRO.replace(n_embed=48)).eval()
    kept, reason = decode_cast(close)  # 1.12x clears 1.1x, not by its spread: fp32, and so next time
    assert kept is close and "within the noise (±0.04) of the 1.10x that pays" in reason
    monkeypatch.setattr(decode_timing, "measure_decode_ratio", lambda a, b: pytest.fail("measured again"))
    kept, reason = decode_cast(build_model(MICRO.replace(n_embed=48)).eval())
    assert next(kept.parameters()).dtype == torch.float32 and reason.endswith("that pays (cached)")


def timing(ratio: float, spread: float = 0.0) -> measure_cache.Alternated:
    """A decode timing with this fp32 / bf16 ratio."""
    return measure_cache.Alternated(ratio * 0.01, 0.01, spread)


def test_cast_for_decoding_without_native_bf16_is_fp32(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(decode_precision, "native_bf16", lambda flags=None: None)
    model = build_model(MICRO).eval()
    assert decode_cast(model) == (model, "fp32 weights: this CPU has no native bf16 matmul")


def test_decode_ratio_is_measured_on_the_engine(one_thread: None) -> None:
    model = build_model(MICRO).eval()
    timed = decode_timing.measure_decode_ratio(model, copy.deepcopy(model).to(torch.bfloat16))
    assert 0.05 < timed.ratio < 20 and timed.spread >= 0  # a real timing of both; which wins is the machine's


def _rank_dependent_choice(rank: int, world_size: int, init_file: str, results: object) -> None:
    import torch.distributed as dist

    from tinylm.runtime.agreed import decided_on_rank0

    dist.init_process_group("gloo", init_method=f"file://{init_file}", rank=rank, world_size=world_size)
    try:
        results[rank] = decided_on_rank0(lambda: f"measured on rank {rank}")  # type: ignore[index]
    finally:
        dist.destroy_process_group()


@pytest.mark.slow  # two spawned processes: ~10 s on a busy 2-core machine
def test_every_rank_takes_rank_0s_measured_decision(tmp_path: Path) -> None:
    """Two gloo processes whose own measurements would differ end up with the same (rank 0's) decision."""
    import torch.multiprocessing as mp

    with mp.Manager() as manager:
        results = manager.dict()
        mp.spawn(_rank_dependent_choice, args=(2, str(tmp_path / "init"), results), nprocs=2, join=True)
        assert dict(results) == {0: "measured on rank 0", 1: "measured on rank 0"}


def test_load_for_generation_reports_its_decode_precision(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    from test_generate_cli import make_run
    from tinylm.inference.loading import load_for_generation

    monkeypatch.setattr(decode_precision, "native_bf16", lambda flags=None: "AVX512-BF16")
    monkeypatch.setattr(decode_precision, "MIN_MEASURED_BYTES", 0)
    monkeypatch.setattr(decode_timing, "measure_decode_ratio", lambda a, b: timing(1.5))
    model, _, meta = load_for_generation(str(make_run(tmp_path)), device="cpu")
    assert next(model.parameters()).dtype == torch.bfloat16 and "1.50x faster" in meta["decode_precision"]
    calls: list[tuple[type, type]] = []

    def ratio(fp32_model: torch.nn.Module, bf16_model: torch.nn.Module) -> measure_cache.Alternated:
        calls.append((type(fp32_model.blocks[0].mlp.up), next(bf16_model.buffers()).dtype))
        return timing(1.5)

    monkeypatch.setattr(decode_timing, "measure_decode_ratio", ratio)
    model, _, meta = load_for_generation(str(make_run(tmp_path, name="int8")), int8=True, device="cpu")
    # the int8 model is measured under its own key: int8 rows stay int8, the activations become bf16
    assert meta["decode_precision"].startswith("int8 weights, bf16 activations") and len(calls) == 1
    assert calls[0][0] is Int8Linear and model.blocks[0].mlp.up.qweight.dtype == torch.int8
    assert model.blocks[0].mlp.up.scale.dtype == torch.bfloat16 and model.token_embed.weight.dtype == torch.bfloat16
