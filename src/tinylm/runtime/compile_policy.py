"""`--compile auto|on|off`: compile each block, and only when the run is long enough to pay the compile back.

Per block, not the whole model: every block has the same code and shapes, so one compiled graph serves
all of them (compile time does not grow with depth), the chunked loss stays the hand-written
autograd function it is (`models/loss.py`) with only its per-chunk softmax and gradient compiled
(`compile_output_loss`), the state-dict keys do not change (`Module.compile` works
in place, so checkpoints stay loadable without compile), and gradient checkpointing wraps compiled
blocks as it wraps eager ones.

Compiling costs seconds to minutes of C++ code generation before the first step, and the gain per step
depends on the CPU, the width and the dtype. `auto` therefore decides from measurements: a probe times a
one-block copy of the model eager, then compiles it (the first compiled call is the compile time) and
times compiled and eager steps alternating, at the run's batch shape and dtype; a gain within the
spread of those repeats is no gain (eager, the safe default). The probe is cached per machine and
shape class, busy machine or not, and so is the eager estimate a short run decides on, so a second
run of the command decides the same. The probe itself is only worth running when the planned run is
long (`PROBE_WORTH_S`); a short run without a cached measurement stays eager and says so.
"""

from __future__ import annotations

import shutil
from collections.abc import Callable, Iterator
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
from tinylm.runtime.measure_cache import best_of_alternating, clock, config_digest, load_numbers, store_entry

CACHE_KIND = "compile"
COMPILE_MODES: tuple[str, ...] = ("auto", "on", "off")
PROBE_WORTH_S = 600.0  # a run shorter than this (eager estimate) never pays for a first compile probe
PAYBACK_MARGIN = 1.2  # the time saved must exceed the compile time by this factor
PROBE_STEPS = 3
PROBE_BUDGET_S = 20.0  # for the alternating compiled/eager pairs, past the first `measure_cache.MIN_PAIRS`


@dataclass(frozen=True)
class CompileMeasurement:
    """A one-block probe at the run's shape: compile seconds and forward+backward seconds per step."""

    compile_s: float
    eager_s: float
    compiled_s: float
    spread: float = 0.0  # of the speedup eager_s / compiled_s (`measure_cache.Alternated.spread`)

    @property
    def speedup(self) -> float:
        return self.eager_s / max(self.compiled_s, 1e-12)

    @property
    def saved_per_block_s(self) -> float:
        """Seconds a compiled block saves per step at the low end of the measured speedup (0: none for sure)."""
        low = self.speedup - self.spread
        return self.eager_s * (1 - 1 / low) if low > 1 else 0.0


def have_compiler() -> bool:
    """Inductor generates C++ on a CPU: without a compiler `torch.compile` fails at the first call."""
    return any(shutil.which(name) for name in ("c++", "g++", "clang++"))


def compile_key(config: ModelConfig, batch_size: int, seq_len: int, dtype: torch.dtype,
                attention: str = "sdpa") -> str:
    digest = config_digest(config, exclude=("n_blocks", "dropout"))
    kernel = "" if attention == "sdpa" else f" {attention}"  # sdpa keeps the keys measured before the choice existed
    precision = str(dtype).removeprefix("torch.")
    return f"{config.arch} d{config.n_embed} {batch_size}x{seq_len} {precision}{kernel} {digest}"


def compile_blocks(model: nn.Module, backend: str = "inductor", dynamic: bool | None = None) -> None:
    """torch.compile every block of `model` in place, and the per-chunk softmax of its loss.

    The embedding and the head's matmuls stay eager; the loss's elementwise passes over each
    [rows, vocab] chunk are fused (`models/loss.compile_output_loss`).

    `dynamic=False` compiles each input shape on its own, for a run that knows its few shapes (pretraining's
    warmup: three); torch's default (None) recompiles for symbolic shapes at the second shape, which measured
    155 s on the demo's second warmup stage and slower kernels after it. `backend="aot_eager"` traces the same
    graphs without generating code: what the fast tests use.
    """
    if backend == "inductor" and not have_compiler() and next(model.parameters()).device.type == "cpu":
        raise TinyLMError("--compile on a CPU needs a C++ compiler (install g++ or clang), or use --compile off")
    for block in model.blocks:  # type: ignore[union-attr]
        block.compile(backend=backend, dynamic=dynamic)
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
            start = clock()
            with autocast(device, dtype):
                _, loss = model(x, x, return_logits=False)
            loss.backward()
            model.zero_grad(set_to_none=True)
            return clock() - start

        def eager_step() -> None:
            with eager_blocks():
                step()

        step()
        eager = min(step() for _ in range(PROBE_STEPS))
        if not compiled:
            return CompileMeasurement(0.0, eager, eager)
        compile_blocks(model)
        first = step()
        timing = best_of_alternating(eager_step, step, PROBE_STEPS, PROBE_BUDGET_S)
    finally:
        torch.set_rng_state(cpu_rng)
    return CompileMeasurement(max(0.0, first - timing.second_s), timing.first_s, timing.second_s,
                              timing.spread)


def cached_measurement(key: str) -> CompileMeasurement | None:
    """A full probe for `key` (an entry without its spread was written before it was kept: probe again)."""
    stored = load_numbers(CACHE_KIND, key, ("compile_s", "eager_s", "compiled_s", "spread"))
    return None if stored is None else CompileMeasurement(**stored)


def record_measurement(key: str, measurement: CompileMeasurement) -> None:
    store_entry(CACHE_KIND, key, asdict(measurement))


def eager_estimate(key: str, measure: Callable[[], CompileMeasurement]) -> float:
    """Eager seconds of a one-block step: the cached full probe's, the cached eager probe's, or measured and kept.

    Kept because a short run decides on it: measured anew, a run near `PROBE_WORTH_S` could probe one
    time and not the next.
    """
    full = cached_measurement(key)
    if full is not None:
        return full.eager_s
    stored = load_numbers(CACHE_KIND, f"{key} eager", ("eager_s",))
    if stored is not None:
        return stored["eager_s"]
    eager_s = measure().eager_s
    store_entry(CACHE_KIND, f"{key} eager", {"eager_s": eager_s})
    return eager_s


def decide(measurement: CompileMeasurement, planned_steps: int, n_blocks: int, cached: bool,
           shapes: int = 1) -> Choice[bool]:
    """Compile iff the planned steps save more time than the compile costs (with a margin), once per input
    shape the run will use (a warmup's shorter rows are other shapes, each compiled on its own).

    The time saved is counted at the low end of the measured speedup: a gain the noise could erase is none.
    """
    saved_per_step = measurement.saved_per_block_s * n_blocks
    source = "cached" if cached else "probed now"
    speedup, spread = measurement.speedup, measurement.spread
    measured = asdict(measurement)
    if speedup <= 1:
        return Choice(CACHE_KIND, False, f"eager: a compiled one-block step measured {speedup:.2f}x of eager, "
                                         f"no gain ({source})", measured, cached)
    if saved_per_step <= 0:
        return Choice(CACHE_KIND, False, f"eager: a compiled one-block step measured {speedup:.2f}x of eager, "
                                         f"within the noise (±{spread:.2f}): no sure gain ({source})", measured, cached)
    payback = measurement.compile_s * shapes * PAYBACK_MARGIN / saved_per_step
    each = f" x {shapes} shapes" if shapes > 1 else ""
    what = (f"compile {measurement.compile_s:.0f} s{each}, one-block step {speedup:.2f}x faster (±{spread:.2f}), "
            f"pays back after {payback:,.0f} steps")
    if planned_steps >= payback:
        return Choice(CACHE_KIND, True, f"compile per block: {what}; the run plans {planned_steps:,} ({source})",
                      measured, cached)
    return Choice(CACHE_KIND, False, f"eager: {what}; the run plans only {planned_steps:,} ({source})",
                  measured, cached)


def plan_compile(requested: str, planned_steps: int, est_step_s: float | None, *, model_config: ModelConfig,
                 batch_size: int, seq_len: int, dtype: torch.dtype, device: torch.device,
                 time_budget_s: float | None = None, attention: str = "sdpa", shapes: int = 1) -> Choice[bool]:
    """Whether to compile the blocks of this run: `on`/`off` as asked, `auto` by measured payback.

    `planned_steps` counts forward+backward passes of one micro-batch (optimizer steps x accumulation)
    still to run; `est_step_s` is the eager seconds of one such pass if the caller knows it (None: the
    probe's eager one-block time times the depth, an over-estimate that counts the head once per
    block); a `time_budget_s` caps the run at what fits in it; `shapes` is how many input shapes the run
    will compile (each costs the measured compile time). Under torchrun rank 0 decides for all.
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
    return decided_on_rank0(lambda: _plan_auto(planned_steps, est_step_s, time_budget_s, shapes, *shape))


def _plan_auto(planned_steps: int, est_step_s: float | None, time_budget_s: float | None, shapes: int,
               model_config: ModelConfig,
               batch_size: int, seq_len: int, dtype: torch.dtype, device: torch.device,
               attention: str) -> Choice[bool]:
    key = compile_key(model_config, batch_size, seq_len, dtype, attention)
    found = cached_measurement(key)
    if est_step_s is None:
        est_step_s = model_config.n_blocks * eager_estimate(key, lambda: measure_compile(
            model_config, batch_size, seq_len, dtype, device, compiled=False, attention=attention))
    if time_budget_s is not None:
        planned_steps = min(planned_steps, max(1, int(time_budget_s / max(est_step_s, 1e-9))))
    if found is not None:
        return decide(found, planned_steps, model_config.n_blocks, cached=True, shapes=shapes)
    if planned_steps * est_step_s < PROBE_WORTH_S:
        return Choice(CACHE_KIND, False, f"eager: the run (~{planned_steps * est_step_s / 60:.0f} min eager) is too "
                                         "short to pay for a first compile probe; no compile probe cached for this "
                                         "shape", {"eager_step_s": est_step_s})
    measured = measure_compile(model_config, batch_size, seq_len, dtype, device, attention=attention)
    record_measurement(key, measured)
    return decide(measured, planned_steps, model_config.n_blocks, cached=False, shapes=shapes)
