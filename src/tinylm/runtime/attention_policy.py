"""`--attention auto|sdpa|blockwise`: which kernel computes causal attention in training, chosen by measuring.

`F.scaled_dot_product_attention` is the right kernel on a GPU. On a CPU its flash kernel can lose to
plain matrix products over blocks of queries (`models/modern/blockwise_attention.py`) by 2x in bf16,
or beat them in float32: the answer depends on the CPU, the head shape, the sequence length and the
dtype. `auto` therefore times the model's own attention layer (projections, RoPE, attention, forward
and backward) at the run's shape and dtype with each kernel, alternating, and takes the blockwise
kernel only when its best pass beats SDPA's by `BLOCKWISE_MARGIN`, and by more than the spread of the
repeats (a close call keeps SDPA). The decision is cached per machine and shape, busy machine or
not (`runtime/measure_cache.py`), so it is paid once and a second run of the command computes the
same. The timing is eager: compiled, the blockwise kernel's mask, softmax and casts fuse into one
loop and it gained more than SDPA in every shape measured (docs/pipeline/precision.md), so an eager
win carries over.

Both kernels compute the same function (tests/test_blockwise_attention.py): the choice moves float
rounding, never the model. In bf16 that rounding is coarser with the blockwise kernel (its scores are
rounded to bf16, as in `transformers`' eager attention; SDPA's flash kernel keeps them in float32), so
the header says so, and `--attention sdpa` keeps the more accurate kernel whatever the speed. A
resumed run keeps the kernel it started with, so resume stays bit-exact.
"""

from __future__ import annotations

import time
from dataclasses import dataclass

import torch
from torch import nn

from tinylm.config import ModelConfig
from tinylm.errors import TinyLMError
from tinylm.models.modern.attention import ATTENTION_KERNELS, Attention
from tinylm.models.modern.blockwise_attention import query_blocks
from tinylm.models.modern.rope import RotaryEmbedding
from tinylm.runtime.agreed import decided_on_rank0
from tinylm.runtime.choice import Choice
from tinylm.runtime.device import autocast
from tinylm.runtime.measure_cache import (
    best_of_alternating,
    config_digest,
    load_decision,
    measured_now,
    store_decision,
    verdict,
)
from tinylm.runtime.precision import calibration_rows

ATTENTION_MODES: tuple[str, ...] = ("auto", *ATTENTION_KERNELS)
CACHE_KIND = "attention"
BLOCKWISE_MARGIN = 1.05  # below this the two are a tie, and SDPA (one fused kernel, less memory) is kept
CALIBRATION_TOKENS = 4096  # rows x seq_len of a calibration pass, at most
CALIBRATION_REPEATS = 6  # pairs, budget allowing (never fewer than `measure_cache.MIN_PAIRS`)
CALIBRATION_BUDGET_S = 3.0  # no new pair starts after this: a slow machine gets fewer repeats, not a long wait
NUMBERS = ("sdpa_s", "blockwise_s", "ratio", "spread")  # what a cached decision was taken on


@dataclass(frozen=True)
class AttentionTiming:
    """Best seconds of one forward + backward of the attention layer with each kernel."""

    sdpa_s: float
    blockwise_s: float
    wall_s: float = 0.0  # what the measurement took
    spread: float = 0.0  # how far the ratio could move (`measure_cache.Alternated.spread`)

    @property
    def ratio(self) -> float:
        """> 1: the blockwise kernel is faster."""
        return self.sdpa_s / max(self.blockwise_s, 1e-12)

    def numbers(self) -> dict[str, float]:
        return {"sdpa_s": self.sdpa_s, "blockwise_s": self.blockwise_s, "ratio": self.ratio, "spread": self.spread}


def has_blockwise_kernel(config: ModelConfig) -> bool:
    return config.arch == "modern" and config.attention == "standard"


def use_attention_kernel(model: nn.Module, kernel: str) -> None:
    """Set every standard attention layer of `model` to `kernel` ("sdpa" or "blockwise")."""
    if kernel not in ATTENTION_KERNELS:
        raise ValueError(f"unknown attention kernel {kernel!r}")
    for module in model.modules():
        if isinstance(module, Attention):
            module.kernel = kernel


def attention_key(config: ModelConfig, rows: int, seq_len: int, dtype: torch.dtype) -> str:
    digest = config_digest(config, exclude=("n_blocks", "gradient_checkpointing", "dropout"))
    return (f"{config.n_head}h/{config.kv_heads}kv x {config.dim_per_head} {rows}x{seq_len} "
            f"{str(dtype).removeprefix('torch.')} {digest}")


def time_kernels(config: ModelConfig, rows: int, seq_len: int, dtype: torch.dtype, device: torch.device,
                 repeats: int = CALIBRATION_REPEATS) -> AttentionTiming:
    """Forward + backward of one attention layer of the model, SDPA and blockwise in alternation; best of each.

    The random-number state is saved and restored, so measuring changes nothing a seeded run does.
    """

    cpu_rng = torch.get_rng_state()
    began = time.perf_counter()
    try:
        torch.manual_seed(0)
        layer = Attention(config.replace(dropout=0.0)).to(device).train()
        rope = RotaryEmbedding(config.dim_per_head, seq_len, config.rope_theta).to(device)
        cos, sin = rope(torch.arange(seq_len, device=device), torch.float32, upto=seq_len)
        x = torch.randn(rows, seq_len, config.n_embed, device=device, requires_grad=True)

        def step(kernel: str) -> None:
            layer.kernel = kernel
            with autocast(device, dtype):
                y = layer(x, cos, sin, None, True)
            y.float().sum().backward()
            layer.zero_grad(set_to_none=True)
            x.grad = None

        timing = best_of_alternating(lambda: step("sdpa"), lambda: step("blockwise"), repeats, CALIBRATION_BUDGET_S)
    finally:
        torch.set_rng_state(cpu_rng)
    return AttentionTiming(timing.first_s, timing.second_s, time.perf_counter() - began, timing.spread)


def decide(timing: AttentionTiming, dtype: torch.dtype) -> tuple[str, str]:
    """Blockwise only where it beats SDPA by `BLOCKWISE_MARGIN` and by more than the spread; the reason, no "how"."""
    ratio, spread, pays = timing.ratio, timing.spread, f"the {BLOCKWISE_MARGIN:.2f}x that pays"
    found = verdict(ratio, spread, BLOCKWISE_MARGIN)
    if found == "pays":
        rounding = ", bf16 scores as in transformers' eager attention" if dtype == torch.bfloat16 else ""
        return "blockwise", (f"blockwise causal{rounding}: the attention layer measured {ratio:.2f}x faster than "
                             f"with SDPA, ±{spread:.2f}")
    if found == "noise":
        return "sdpa", (f"sdpa: the blockwise kernel measured {ratio:.2f}x of SDPA, within the noise (±{spread:.2f}) "
                        f"of {pays}")
    return "sdpa", f"sdpa: the blockwise kernel measured {ratio:.2f}x of SDPA, below {pays}"


def decided_kernel(config: ModelConfig, batch_size: int, seq_len: int, dtype: torch.dtype,
                   device: torch.device) -> Choice[str]:
    """The cached decision for this machine and shape, or a measurement now, decided and kept either way."""
    rows = calibration_rows(batch_size, seq_len, CALIBRATION_TOKENS)
    key = attention_key(config, rows, seq_len, dtype)
    stored = load_decision(CACHE_KIND, key, NUMBERS, ATTENTION_KERNELS)
    if stored is not None:
        return Choice(CACHE_KIND, stored.value, f"{stored.reason} (cached)", stored.numbers, True)
    timing = time_kernels(config, rows, seq_len, dtype, device)
    kernel, reason = decide(timing, dtype)
    kept = store_decision(CACHE_KIND, key, kernel, reason, timing.numbers())
    return Choice(CACHE_KIND, kernel, f"{reason} ({measured_now(timing.wall_s, kept)})", timing.numbers())


def choose_attention(requested: str, config: ModelConfig, batch_size: int, seq_len: int, dtype: torch.dtype,
                     device: torch.device) -> Choice[str]:
    """The attention kernel of a training run and its reason; an explicit `--attention` always wins.

    Under torchrun rank 0 measures and every rank takes its choice (`agreed.decided_on_rank0`).
    """
    if requested not in ATTENTION_MODES:
        raise TinyLMError(f"unknown --attention {requested!r}: choose {', '.join(ATTENTION_MODES)}")
    if not has_blockwise_kernel(config):
        if requested == "blockwise":
            raise TinyLMError("--attention blockwise needs the modern arch with standard attention "
                              f"(this model: arch {config.arch}, attention {config.attention})")
        return Choice(CACHE_KIND, "sdpa", "the model's own: the blockwise kernel is for the modern arch's standard "
                                          "attention")
    if requested != "auto":
        return Choice(CACHE_KIND, requested, f"{requested}: --attention {requested}, not measured")
    if device.type != "cpu":
        return Choice(CACHE_KIND, "sdpa", f"sdpa: its flash kernels are the fast path on {device.type}")
    if len(query_blocks(seq_len)) == 1:
        return Choice(CACHE_KIND, "sdpa", f"sdpa: rows of {seq_len} tokens are a single query block, with nothing "
                                          "above the diagonal to skip (not measured)")
    return decided_on_rank0(lambda: decided_kernel(config, batch_size, seq_len, dtype, device))
