"""`--compile auto|on|off`: compile each block, and only when the run is long enough to pay the compile back.

Per block, not the whole model: every block has the same code and shapes, so one compiled graph serves
all of them (compile time does not grow with depth), the chunked loss stays the hand-written
autograd function it is (`models/loss.py`) with only its per-chunk softmax and gradient compiled
(`compile_output_loss`), the state-dict keys do not change (`Module.compile` works
in place, so checkpoints stay loadable without compile), and gradient checkpointing wraps compiled
blocks as it wraps eager ones.

Compiling costs seconds to minutes of C++ code generation before the first step, and the gain per step
depends on the CPU, the width and the dtype. `auto` therefore decides from measurements: a probe times a
one-block copy of the model eager, then compiled (the first compiled call is the compile time), at the
run's batch shape and dtype; the result is cached per machine and shape class. The probe itself is only
worth running when the planned run is long (`PROBE_WORTH_S`); a short run without a cached measurement
stays eager and says so.
"""

from __future__ import annotations

import shutil
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import asdict, dataclass

import torch
from torch import nn

from tinylm.config import ModelConfig
from tinylm.errors import TinyLMError
from tinylm.models.factory import build_model
from tinylm.models.loss import compile_output_loss
from tinylm.runtime.agreed import decided_on_rank0
from tinylm.runtime.attention_policy import use_attention_kernel
from tinylm.runtime.choice import Choice
from tinylm.runtime.device import autocast
from tinylm.runtime.measure_cache import config_digest, load_numbers, store_entry

CACHE_KIND = "compile"
COMPILE_MODES: tuple[str, ...] = ("auto", "on", "off")
PROBE_WORTH_S = 600.0  # a run shorter than this (eager estimate) never pays for a first compile probe
PAYBACK_MARGIN = 1.2  # the time saved must exceed the compile time by this factor
PROBE_STEPS = 3


@dataclass(frozen=True)
class CompileMeasurement:
    """A one-block probe at the run's shape: compile seconds and forward+backward seconds per step."""

    compile_s: float
    eager_s: float
    compiled_s: float

    @property
    def saved_per_block_s(self) -> float:
        return self.eager_s - self.compiled_s


def have_compiler() -> bool:
    """Inductor generates C++ on a CPU: without a compiler `torch.compile` fails at the first call."""
    return any(shutil.which(name) for name in ("c++", "g++", "clang++"))


def compile_key(config: ModelConfig, batch_size: int, seq_len: int, dtype: torch.dtype,
                attention: str = "sdpa") -> str:
    digest = config_digest(config, exclude=("n_blocks", "dropout"))
    kernel = "" if attention == "sdpa" else f" {attention}"  # sdpa keeps the keys measured before the choice existed
    precision = str(dtype).removeprefix("torch.")
    return f"{config.arch} d{config.n_embed} {batch_size}x{seq_len} {precision}{kernel} {digest}"


def compile_blocks(model: nn.Module, backend: str = "inductor") -> None:
    """torch.compile every block of `model` in place, and the per-chunk softmax of its loss.

    The embedding and the head's matmuls stay eager; the loss's elementwise passes over each
    [rows, vocab] chunk are fused (`models/loss.compile_output_loss`).

    `backend="aot_eager"` traces the same graphs without generating code: what the fast tests use.
    """
    if backend == "inductor" and not have_compiler() and next(model.parameters()).device.type == "cpu":
        raise TinyLMError("--compile on a CPU needs a C++ compiler (install g++ or clang), or use --compile off")
    for block in model.blocks:  # type: ignore[union-attr]
        block.compile(backend=backend)
    compile_output_loss(model.lm_head, backend)  # type: ignore[arg-type]


@contextmanager
def eager_blocks() -> Iterator[None]:
    """Run compiled blocks eagerly (token-by-token decoding would compile a graph per cache length)."""
    with torch.compiler.set_stance("force_eager"):
        yield


def measure_compile(config: ModelConfig, batch_size: int, seq_len: int, dtype: torch.dtype,
                    device: torch.device, compiled: bool = True, attention: str = "sdpa") -> CompileMeasurement:
    """Probe a one-block copy: eager forward+backward, then (if `compiled`) compile time and compiled step.

    `attention` is the run's attention kernel (`attention_policy.py`): the probe times what the run runs.
    Random-number state is saved and restored, so probing changes nothing a seeded run does.
    """

    cpu_rng = torch.get_rng_state()
    try:
        torch.manual_seed(0)
        model = build_model(config.replace(n_blocks=1, dropout=0.0, gradient_checkpointing=False)).to(device)
        use_attention_kernel(model, attention)
        x = torch.randint(0, config.vocab_size, (batch_size, seq_len), device=device)

        def step() -> float:
            start = time.perf_counter()
            with autocast(device, dtype):
                _, loss = model(x, x, return_logits=False)
            loss.backward()
            model.zero_grad(set_to_none=True)
            return time.perf_counter() - start

        step()
        eager = min(step() for _ in range(PROBE_STEPS))
        if not compiled:
            return CompileMeasurement(0.0, eager, eager)
        compile_blocks(model)
        first = step()
        fast = min(step() for _ in range(PROBE_STEPS))
    finally:
        torch.set_rng_state(cpu_rng)
    return CompileMeasurement(max(0.0, first - fast), eager, fast)


def cached_measurement(key: str) -> CompileMeasurement | None:
    stored = load_numbers(CACHE_KIND, key, ("compile_s", "eager_s", "compiled_s"))
    return None if stored is None else CompileMeasurement(**stored)


def record_measurement(key: str, measurement: CompileMeasurement) -> None:
    store_entry(CACHE_KIND, key, asdict(measurement))


def decide(measurement: CompileMeasurement, planned_steps: int, n_blocks: int, cached: bool) -> Choice[bool]:
    """Compile iff the planned steps save more time than the compile costs (with a margin)."""
    saved_per_step = measurement.saved_per_block_s * n_blocks
    source = "cached" if cached else "probed now"
    speedup = measurement.eager_s / max(measurement.compiled_s, 1e-12)
    measured = asdict(measurement)
    if saved_per_step <= 0:
        return Choice(CACHE_KIND, False, f"eager: a compiled one-block step measured {speedup:.2f}x of eager, "
                                         f"no gain ({source})", measured, cached)
    payback = measurement.compile_s * PAYBACK_MARGIN / saved_per_step
    what = (f"compile {measurement.compile_s:.0f} s, one-block step {speedup:.2f}x faster, "
            f"pays back after {payback:,.0f} steps")
    if planned_steps >= payback:
        return Choice(CACHE_KIND, True, f"compile per block: {what}; the run plans {planned_steps:,} ({source})",
                      measured, cached)
    return Choice(CACHE_KIND, False, f"eager: {what}; the run plans only {planned_steps:,} ({source})",
                  measured, cached)


def plan_compile(requested: str, planned_steps: int, est_step_s: float | None, *, model_config: ModelConfig,
                 batch_size: int, seq_len: int, dtype: torch.dtype, device: torch.device,
                 time_budget_s: float | None = None, attention: str = "sdpa") -> Choice[bool]:
    """Whether to compile the blocks of this run: `on`/`off` as asked, `auto` by measured payback.

    `planned_steps` counts forward+backward passes of one micro-batch (optimizer steps x accumulation)
    still to run; `est_step_s` is the eager seconds of one such pass if the caller knows it (None: the
    probe's eager one-block time times the depth, an over-estimate that counts the head once per
    block); a `time_budget_s` caps the run at what fits in it. Under torchrun rank 0 decides for all.
    """
    if requested not in COMPILE_MODES:
        raise TinyLMError(f"unknown --compile {requested!r}: choose auto, on or off")
    if requested == "on":
        if device.type == "cpu" and not have_compiler():
            raise TinyLMError("--compile on a CPU needs a C++ compiler (install g++ or clang), or use --compile off")
        return Choice(CACHE_KIND, True, "compile per block: asked for with --compile on")
    if requested == "off":
        return Choice(CACHE_KIND, False, "eager: --compile off")
    if device.type == "cpu" and not have_compiler():
        return Choice(CACHE_KIND, False, "eager: no C++ compiler found, which torch.compile needs on a CPU")
    shape = (model_config, batch_size, seq_len, dtype, device, attention)
    return decided_on_rank0(lambda: _plan_auto(planned_steps, est_step_s, time_budget_s, *shape))


def _plan_auto(planned_steps: int, est_step_s: float | None, time_budget_s: float | None, model_config: ModelConfig,
               batch_size: int, seq_len: int, dtype: torch.dtype, device: torch.device,
               attention: str) -> Choice[bool]:
    key = compile_key(model_config, batch_size, seq_len, dtype, attention)
    found = cached_measurement(key)
    if est_step_s is None:
        probe = found or measure_compile(model_config, batch_size, seq_len, dtype, device, compiled=False,
                                         attention=attention)
        est_step_s = probe.eager_s * model_config.n_blocks
    if time_budget_s is not None:
        planned_steps = min(planned_steps, max(1, int(time_budget_s / max(est_step_s, 1e-9))))
    if found is not None:
        return decide(found, planned_steps, model_config.n_blocks, cached=True)
    if planned_steps * est_step_s < PROBE_WORTH_S:
        return Choice(CACHE_KIND, False, f"eager: the run (~{planned_steps * est_step_s / 60:.0f} min eager) is too "
                                         "short to pay for a first compile probe; no measurement cached for this "
                                         "shape", {"eager_step_s": est_step_s})
    measured = measure_compile(model_config, batch_size, seq_len, dtype, device, attention=attention)
    record_measurement(key, measured)
    return decide(measured, planned_steps, model_config.n_blocks, cached=False)
