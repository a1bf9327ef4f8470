"""`tinylm bench` at a micro scale: the JSON it promises, and ratios derived from same-run measurements."""

from __future__ import annotations

import json
import statistics

import pytest
import torch

from tinylm.bench import timing
from tinylm.bench.loader_cost import loader_cost
from tinylm.bench.profile import profile_step
from tinylm.bench.suite import BenchOptions, format_table, run_bench
from tinylm.bench.timing import Measurement, interleaved, ratio
from tinylm.cli.main import main

MICRO = {"vocab_size": 256, "n_embed": 32, "n_head": 2, "n_kv_head": 1, "n_blocks": 1, "context_length": 32}
CPU = torch.device("cpu")


def test_interleaved_alternates_and_ratio_is_median_over_median(monkeypatch: pytest.MonkeyPatch) -> None:
    """A fake clock: candidate a takes 1 s per call, b takes 4 s; calls alternate a, b, a, b."""
    now = [0.0]
    order: list[str] = []
    monkeypatch.setattr(timing, "clock", lambda: now[0])

    def work(name: str, seconds: float):
        def run() -> None:
            order.append(name)
            now[0] += seconds
        return run

    measured = interleaved({"a": (work("a", 1.0), 100.0), "b": (work("b", 4.0), 100.0)}, CPU, repeats=3, warmup=1)
    assert order == ["a", "b"] + ["a", "b"] * 3  # warm-up once each, then strictly alternating
    assert measured["a"].samples == [100.0] * 3 and measured["b"].samples == [25.0] * 3
    assert ratio(measured["a"], measured["b"]) == 4.0
    assert ratio(measured["a"], None) is None


def test_measurement_reports_median_and_spread() -> None:
    m = Measurement([3.0, 1.0, 10.0, 2.0, 4.0])
    assert (m.median, m.low, m.high) == (3.0, 1.0, 10.0)
    assert m.to_dict()["samples"] == [3.0, 1.0, 10.0, 2.0, 4.0]


@pytest.fixture(scope="module")
def micro_result() -> dict:
    torch.set_num_threads(2)
    options = BenchOptions(preset="tiny", overrides=MICRO, batch_size=2, seq_len=16, repeats=2, warmup=1,
                           device="cpu", threads=2, decode_tokens=8, sections=("decode", "train"))
    return run_bench(options)


def test_bench_json_has_every_promised_key(micro_result: dict) -> None:
    for key in ("matmul_peak_flops", "train_tokens_per_s", "mfu", "reference_train_tokens_per_s",
                "train_ratio_vs_transformers", "decode_tokens_per_s", "reference_decode_tokens_per_s",
                "decode_ratio_vs_transformers", "peak_flops", "mfu_with_attention"):
        assert micro_result[key] is not None, key
    assert micro_result["reference_model"] == "LlamaForCausalLM"
    json.dumps(micro_result)  # JSON-ready as it is


def test_ratios_and_mfu_derive_from_the_same_run_samples(micro_result: dict) -> None:
    r = micro_result
    assert len(r["train"]["samples"]) == len(r["reference_train"]["samples"]) == 2
    assert r["train_tokens_per_s"] == statistics.median(r["train"]["samples"])
    assert r["reference_train_tokens_per_s"] == statistics.median(r["reference_train"]["samples"])
    assert r["train_ratio_vs_transformers"] == r["train_tokens_per_s"] / r["reference_train_tokens_per_s"]
    assert r["decode_ratio_vs_transformers"] == r["decode_tokens_per_s"] / r["reference_decode_tokens_per_s"]
    assert r["mfu"] == pytest.approx(r["flops_per_token_6n"] * r["train_tokens_per_s"] / r["peak_flops"])
    # tied modern model: the matmul parameters are all parameters (the shared table is the output head)
    assert r["matmul_params"] == r["params"]
    assert "training tokens/s" in format_table(r)
    # the decode roofline: every fp32 weight (the tied table once) and the fp32 cache so far read per token at the
    # measured bandwidth; the cache: K and V of every block and kv head over 8 prompt + (n - 1) / 2 positions, mean
    assert r["decode_weight_bytes"] == 4 * r["params"]
    head_dim = MICRO["n_embed"] // MICRO["n_head"]
    cache = 2 * MICRO["n_blocks"] * MICRO["n_kv_head"] * head_dim * 4 * (8 + (r["decode_new_tokens"] - 1) / 2)
    assert r["decode_read_bytes_per_token"] == r["decode_weight_bytes"] + cache
    assert r["memory_read_bytes_per_s"] > 1e8 and r["memory_read_bytes_per_s_one_thread"] > 1e8
    assert r["decode_roofline_tokens_per_s"] == r["memory_read_bytes_per_s"] / r["decode_read_bytes_per_token"]
    assert r["decode_share_of_roofline"] == r["decode_tokens_per_s"] / r["decode_roofline_tokens_per_s"]
    assert "decode roofline" in format_table(r)


def test_loader_cost_is_a_fraction_of_the_given_step_rate() -> None:
    result = loader_cost(batch_size=4, seq_len=16, vocab_size=300, repeats=2, step_tokens_per_s=1000.0,
                         batches_per_repeat=5)
    assert result["loader_fraction_of_step"] == 1000.0 / result["loader_tokens_per_s"]


def test_tokenizer_section_matches_ids_and_reports_ratio() -> None:
    from tinylm.bench.tokenize import tokenizer_speed

    result = tokenizer_speed(repeats=2, vocab_size=300, train_bytes=100_000, encode_bytes=100_000)
    assert result["tokenizer_ids_match"] is True
    assert result["tokenizer_ratio_vs_tiktoken"] == (result["tokenizer_encode_mb_per_s"]
                                                      / result["reference_tokenizer_encode_mb_per_s"])


def test_profile_groups_add_up() -> None:
    x = torch.randn(64, 64, requires_grad=True)
    result = profile_step(lambda: (x @ x).relu().sum().backward(), steps=2)
    assert sum(result["groups"].values()) == pytest.approx(1.0)
    assert "matmul" in result["groups"]


def test_cli_bench_json_and_classic_reference(capsys: pytest.CaptureFixture[str]) -> None:
    sets = [arg for name, value in MICRO.items() if name != "n_kv_head" for arg in ("--set", f"{name}={value}")]
    code = main(["bench", "--arch", "classic", *sets, "--batch-size", "2", "--seq-len", "16", "--repeats", "2",
                 "--warmup", "1", "--device", "cpu", "--only", "train", "--json"])
    assert code == 0
    result = json.loads(capsys.readouterr().out)
    assert result["reference_model"] == "GPT2LMHeadModel"
    assert result["train_ratio_vs_transformers"] == result["train_tokens_per_s"] / result[
        "reference_train_tokens_per_s"]


def test_cli_rejects_unknown_section(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["bench", "--only", "train,warp", "--device", "cpu"]) == 1
    err = capsys.readouterr().err.strip().splitlines()
    assert err[-1].startswith("tinylm: error: unknown bench section(s) warp")


def test_cli_out_that_cannot_be_written_is_one_clear_line(monkeypatch: pytest.MonkeyPatch, tmp_path,
                                                          capsys: pytest.CaptureFixture[str]) -> None:
    """A full disk or read-only folder (faked: CI runs as root, which may write anywhere) is one error line."""
    from pathlib import Path

    def full_disk(self: Path, *args: object, **kwargs: object) -> int:
        raise OSError(28, "No space left on device")

    monkeypatch.setattr(Path, "write_text", full_disk)
    sets = [arg for name, value in MICRO.items() for arg in ("--set", f"{name}={value}")]
    out = tmp_path / "bench.json"
    code = main(["bench", *sets, "--batch-size", "2", "--seq-len", "16", "--repeats", "1", "--warmup", "0",
                 "--device", "cpu", "--only", "train", "--no-reference", "--json", "--out", str(out)])
    captured = capsys.readouterr()
    assert code == 1
    assert json.loads(captured.out)["train_tokens_per_s"] > 0  # the results were printed before the error
    assert captured.err.strip().splitlines()[-1] == (
        f"tinylm: error: cannot write --out {out}: No space left on device (the results are printed above)")


@pytest.fixture
def known_peak(monkeypatch: pytest.MonkeyPatch) -> None:
    """A fixed matmul peak where the peak is not under test: a bf16 one takes seconds on a CPU without bf16."""
    from tinylm.bench import suite

    monkeypatch.setattr(suite, "matmul_peak_flops", lambda device, dtype: 1e11)


@pytest.mark.usefixtures("known_peak")
def test_dtype_auto_uses_the_training_policy_and_says_why(monkeypatch: pytest.MonkeyPatch) -> None:
    from tinylm.runtime import measure_cache, precision

    monkeypatch.setattr(measure_cache, "machine_busy", lambda: False)
    options = BenchOptions(preset="tiny", overrides=MICRO, batch_size=2, seq_len=16, repeats=1, warmup=0,
                           device="cpu", threads=1, dtype="auto", reference=False, decode_tokens=4,
                           sections=("decode", "train"))
    monkeypatch.setattr(precision, "native_bf16", lambda flags=None: None)
    plain = run_bench(options)
    assert plain["options"]["dtype"] == "fp32" and "no native bf16" in plain["dtype_reason"]
    assert plain["decode_dtype"] == "fp32"
    monkeypatch.setattr(precision, "native_bf16", lambda flags=None: "AMX-BF16")
    monkeypatch.setattr(precision, "calibrate", lambda *a, **k: precision.Calibration(0.02, 0.01, 2.0, 0.1))
    fast = run_bench(options)
    assert fast["options"]["dtype"] == "bf16" and "AMX-BF16, calibration 2.00x faster" in fast["dtype_reason"]
    assert "dtype: bf16 autocast" in format_table(fast)


@pytest.mark.usefixtures("known_peak")
def test_explicit_bf16_decodes_with_bf16_weights() -> None:
    options = BenchOptions(preset="tiny", overrides=MICRO, batch_size=2, seq_len=16, repeats=1, warmup=0,
                           device="cpu", threads=1, dtype="bf16", reference=False, decode_tokens=4,
                           sections=("decode",))
    result = run_bench(options)
    assert result["decode_dtype"] == "bf16" and result["decode_tokens_per_s"] > 0


@pytest.mark.usefixtures("known_peak")
def test_int8_decoding_is_measured_against_float_transformers_with_the_int8_bytes() -> None:
    options = BenchOptions(preset="tiny", overrides=MICRO, batch_size=2, seq_len=16, repeats=1, warmup=0,
                           device="cpu", threads=1, dtype="bf16", decode_tokens=4, int8=True,
                           sections=("decode",))
    result = run_bench(options)
    assert result["decode_int8"] and result["decode_dtype"] == "bf16"
    assert result["decode_dtype_reason"] == "bf16 activations, int8 weights: --dtype bf16"
    assert result["reference_decode_tokens_per_s"] > 0  # transformers ran on the float copy of the same weights
    # bf16: the tied 256 x 32 table and three norms of 32; int8: q, o (32 x 32), k, v (16 x 32: one head of 16),
    # gate, up (128 x 32) and down (32 x 128), plus one bf16 scale per output row of each of those layers
    floats = 2 * (256 * 32 + 3 * 32)
    int8 = 32 * (32 + 16 + 16 + 32 + 128 + 128) + 128 * 32
    scales = 2 * (32 + 16 + 16 + 32 + 128 + 128 + 32)
    assert result["decode_weight_bytes"] == floats + int8 + scales
    assert "batch 1, int8 weights" in format_table(result)


def test_the_training_step_reports_its_attention_kernel() -> None:
    options = BenchOptions(preset="tiny", overrides={**MICRO, "context_length": 128}, batch_size=2, seq_len=128,
                           repeats=1, warmup=0, device="cpu", threads=1, reference=False, attention="blockwise",
                           sections=("train",))
    result = run_bench(options)
    assert result["attention_kernel"] == "blockwise" and "--attention blockwise" in result["attention_reason"]
    assert "attention (training step): blockwise" in format_table(result)


@pytest.mark.slow  # ~20 s: two training runs, a studio process and a browser
def test_studio_benchmark_quick_prints_every_promised_key() -> None:
    """benchmarks/bench_studio.py --quick: the three sections and their keys, with sane types (no timings judged)."""
    import subprocess
    import sys
    from pathlib import Path

    script = Path(__file__).resolve().parents[1] / "benchmarks" / "bench_studio.py"
    done = subprocess.run([sys.executable, str(script), "--quick"], capture_output=True, text=True, timeout=600)
    assert done.returncode == 0, done.stderr[-3000:]
    result = json.loads(done.stdout)
    assert result["quick"] is True and result["machine"]["cpu_count"] >= 1
    stream = result["streaming"]
    for key in ("tokens_per_s_a", "tokens_per_s_b", "ratio_b_over_a", "cost_pct"):
        assert isinstance(stream[key], float), key
    assert [r["kind"] for r in stream["runs"]] == ["A", "B"]
    assert all(r["tokens_per_s"] > 0 and r["steps"] > 0 for r in stream["runs"])
    watched = stream["runs"][1]
    assert isinstance(watched["studio_cpu_s"], float) and isinstance(watched["pages_cpu_s"], float)
    assert stream["all_rows_followed"] is True and watched["rows_followed"] == [watched["rows_in_file"]]
    assert stream["ratios_b_over_a"] == [stream["ratio_b_over_a"]]
    load = result["page_load"]
    assert load["all_rows_read"] is True and load["answers"] >= 1 and load["rows"] > load["steps"]
    for key in ("p50_ms", "p95_ms", "run_p50_ms", "extras_p50_ms", "metrics_p50_ms"):
        assert load["api"][key] > 0, key
    browser = load["browser"]
    assert isinstance(browser["available"], bool)
    if browser["available"]:
        assert browser["p50_ms"] > 0 and browser["charts"] >= 1
    else:
        assert isinstance(browser["reason"], str)
    live = result["live_update"]
    assert [s["rows"] for s in live["sizes"]] == [100, 1_000] and live["new_rows"] == 10
    for size in live["sizes"]:
        for key in ("tail_read_p50_ms", "tail_read_p95_ms", "poll_p50_ms", "full_read_p50_ms"):
            assert size[key] > 0, key
        assert size["full_read_answers"] >= 1
    assert isinstance(live["tail_growth_largest_vs_smallest"], float)
