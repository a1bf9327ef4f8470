"""`--dtype auto` on a CPU: bf16 autocast only where this CPU multiplies bf16 natively AND it measures faster.

bf16 halves the bytes and, on CPUs with bf16 dot-product units (Intel AMX-BF16, AVX512-BF16 on Intel
and AMD Zen 4+, Arm BF16), multiplies several times faster than fp32. Whether a training step gains is
another question: autocast casts every weight and activation on the way in, elementwise work stays in
fp32, and at small widths those casts can eat the matmul gain. The CPU can also change from one session
to the next. So the choice is measured, not assumed: a short calibration times forward + backward of a
one-block copy of the model at the run's own widths, sequence length and threads, fp32 and bf16
alternating (a burst of load on a shared machine slows both alike), and bf16 is chosen only if the
ratio of the best passes clears `BF16_MARGIN` by more than its spread (`measure_cache.verdict`): a
close call stays fp32. The decision is cached per machine and shape class, busy machine or not, so it
is paid once and every later run of the command computes the same thing.
GPUs keep the datasheet policy of `device.resolve_dtype` (bf16 where supported).
"""

from __future__ import annotations

import time
from dataclasses import dataclass
from typing import TYPE_CHECKING

from tinylm.config import ModelConfig
from tinylm.models.factory import build_model
from tinylm.runtime.agreed import decided_on_rank0
from tinylm.runtime.choice import Choice, plain
from tinylm.runtime.device import DTYPES, resolve_dtype
from tinylm.runtime.measure_cache import (
    best_of_alternating,
    config_digest,
    cpu_info,
    load_decision,
    measured_now,
    store_decision,
    verdict,
)

if TYPE_CHECKING:
    import torch

BF16_MARGIN = 1.15  # below this, the noise of autocast (and of the measurement) is not worth it
CALIBRATION_TOKENS = 2048  # rows per calibration pass: the run's widths, at most this many tokens
CALIBRATION_REPEATS = 6  # pairs, budget allowing (never fewer than `measure_cache.MIN_PAIRS`)
CALIBRATION_BUDGET_S = 4.0  # no new pair starts after this: a slow machine gets fewer repeats, not a long wait
CACHE_KIND = "precision"
NUMBERS = ("fp32_s", "bf16_s", "ratio", "spread")  # what a cached decision was taken on

# /proc/cpuinfo flag -> the name printed in the run header; the first one present wins
NATIVE_BF16_FLAGS: tuple[tuple[str, str], ...] = (("amx_bf16", "AMX-BF16"), ("avx512_bf16", "AVX512-BF16"),
                                                  ("bf16", "Arm BF16"))


@dataclass(frozen=True)
class Calibration:
    """Best seconds of one calibration pass in each precision; `ratio` > 1 means bf16 is faster."""

    fp32_s: float
    bf16_s: float
    ratio: float
    wall_s: float = 0.0  # what the calibration itself took
    spread: float = 0.0  # how far the ratio could move (`measure_cache.Alternated.spread`)

    def numbers(self) -> dict[str, float]:
        return {"fp32_s": self.fp32_s, "bf16_s": self.bf16_s, "ratio": self.ratio, "spread": self.spread}


def native_bf16(flags: str | None = None) -> str | None:
    """The CPU's native bf16 matmul feature ("AMX-BF16", "AVX512-BF16", "Arm BF16"), or None."""
    if flags is None:
        info = cpu_info()
        flags = info.get("flags") or info.get("features") or ""
    present = set(flags.split())
    return next((name for flag, name in NATIVE_BF16_FLAGS if flag in present), None)


def shape_class(config: ModelConfig, rows: int, seq_len: int) -> str:
    """A cache key for everything that sets the calibration's matmul shapes (not the depth)."""
    digest = config_digest(config, exclude=("n_blocks", "gradient_checkpointing", "dropout"))
    return f"{config.arch} d{config.n_embed} v{config.vocab_size} {rows}x{seq_len} {digest}"


def calibration_rows(batch_size: int, seq_len: int, tokens: int = CALIBRATION_TOKENS) -> int:
    """Rows of a calibration pass: the run's batch, capped at `tokens` tokens (one row at least)."""
    return max(1, min(batch_size, tokens // seq_len))


def calibrate(config: ModelConfig, rows: int, seq_len: int, repeats: int = CALIBRATION_REPEATS) -> Calibration:
    """Forward + backward of a one-block copy of the model in fp32 and in bf16 autocast, alternating.

    The ratio is best over best: load from other processes only ever slows a pass down, so the fastest
    pass of each precision is the one closest to what the machine can do (a median is dragged by a
    burst that lasts several passes).
    The random-number state is saved and restored, so calibrating changes nothing a seeded run does.
    """
    import torch

    cpu_rng = torch.get_rng_state()
    began = time.perf_counter()
    try:
        torch.manual_seed(0)
        model = build_model(config.replace(n_blocks=1, gradient_checkpointing=False, dropout=0.0)).train()
        tokens = torch.randint(0, config.vocab_size, (rows, seq_len + 1))
        x, y = tokens[:, :-1], tokens[:, 1:]

        def step(dtype: torch.dtype) -> None:
            with torch.autocast("cpu", dtype=dtype, enabled=dtype != torch.float32):
                _, loss = model(x, y, return_logits=False)
            loss.backward()
            model.zero_grad(set_to_none=True)

        timing = best_of_alternating(lambda: step(torch.float32), lambda: step(torch.bfloat16), repeats,
                                     CALIBRATION_BUDGET_S)
    finally:
        torch.set_rng_state(cpu_rng)
    return Calibration(timing.first_s, timing.second_s, timing.ratio, time.perf_counter() - began, timing.spread)


def decide(cal: Calibration, feature: str) -> tuple[torch.dtype, str]:
    """bf16 only where the calibration clears `BF16_MARGIN` by more than its spread; the reason without "how"."""
    import torch

    ratio, spread, pays = cal.ratio, cal.spread, f"the {BF16_MARGIN:.2f}x that pays"
    found = verdict(ratio, spread, BF16_MARGIN)
    if found == "pays":
        return torch.bfloat16, f"bf16 autocast: {feature}, calibration {ratio:.2f}x faster than fp32, ±{spread:.2f}"
    if found == "noise":
        return torch.float32, (f"fp32: {feature} present, bf16 autocast measured {ratio:.2f}x of fp32, within the "
                               f"noise (±{spread:.2f}) of {pays}")
    return torch.float32, f"fp32: {feature} present but bf16 autocast calibrated {ratio:.2f}x of fp32, below {pays}"


def choose_cpu_precision(config: ModelConfig, batch_size: int, seq_len: int) -> Choice[torch.dtype]:
    """The cached decision for this machine and shape class, or a calibration now, decided and kept either way."""
    import torch

    feature = native_bf16()
    if feature is None:
        return Choice(CACHE_KIND, torch.float32, "fp32: this CPU has no native bf16 matmul (no AMX-BF16 or "
                                                 "AVX512-BF16)")
    rows = calibration_rows(batch_size, seq_len)
    key = shape_class(config, rows, seq_len)
    stored = load_decision(CACHE_KIND, key, NUMBERS, ("float32", "bfloat16"))
    if stored is not None:
        return Choice(CACHE_KIND, getattr(torch, stored.value), f"{stored.reason} (cached)", stored.numbers, True)
    cal = calibrate(config, rows, seq_len)
    dtype, reason = decide(cal, feature)
    kept = store_decision(CACHE_KIND, key, plain(dtype), reason, cal.numbers())
    return Choice(CACHE_KIND, dtype, f"{reason} ({measured_now(cal.wall_s, kept)})", cal.numbers())


def choose_precision(device: torch.device, requested: str, model_config: ModelConfig, batch_size: int,
                     seq_len: int) -> Choice[torch.dtype]:
    """The autocast dtype for a training run and its reason; an explicit `--dtype` always wins.

    Under torchrun rank 0 calibrates and every rank takes its choice (`agreed.decided_on_rank0`).
    """
    import torch

    if requested not in DTYPES:
        resolve_dtype(device, requested)  # raises the one-line error
    if requested != "auto":
        fixed = f"{requested}: --dtype {requested}, a fixed choice (the command's default or yours), not measured"
        return Choice(CACHE_KIND, resolve_dtype(device, requested), fixed)
    if device.type != "cpu":
        dtype = resolve_dtype(device, "auto")
        where = "this GPU multiplies bf16 natively" if dtype == torch.bfloat16 else f"no fast bf16 on {device.type}"
        return Choice(CACHE_KIND, dtype, f"{'bf16 autocast' if dtype == torch.bfloat16 else 'fp32'}: {where}")
    return decided_on_rank0(lambda: choose_cpu_precision(model_config, batch_size, seq_len))
