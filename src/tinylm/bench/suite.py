"""`run_bench(BenchOptions) -> dict`: every measurement of `tinylm bench`, in one process, as one JSON object.

Order matters for fairness and for correctness: the matmul peak first (an idle machine's ceiling),
then decoding (the `transformers` copy is made from the freshly initialized weights, which every
exporter accepts), then training (tinylm and reference interleaved, step by step), then the data
loader and the tokenizer. Every ratio is median(tinylm) / median(reference) of samples taken in
alternation in this run.
"""

from __future__ import annotations

import copy
import platform
from collections.abc import Callable
from dataclasses import asdict, dataclass
from typing import Any

import torch

from tinylm.bench.decode import decode_tokens_per_s, hf_decode_tokens_per_s
from tinylm.bench.loader_cost import loader_cost
from tinylm.bench.matmul_peak import DTYPE_NAMES, matmul_peak_flops
from tinylm.bench.memory_bandwidth import decode_read_bytes, read_bandwidths, weight_bytes
from tinylm.bench.profile import format_profile, profile_step
from tinylm.bench.timing import Measurement, interleaved, ratio
from tinylm.bench.tokenize import tokenizer_speed
from tinylm.bench.train_step import StepSetup, random_batch, reference_model, reference_step, tinylm_step
from tinylm.errors import TinyLMError
from tinylm.inference.decode_timing import cast_measuring_decode
from tinylm.inference.int8 import quantize_int8
from tinylm.models.accounting import attention_flops_per_token
from tinylm.models.factory import build_model
from tinylm.options import (
    BATCH_SIZE,
    COMPILE,
    COUNT_LIMIT,
    DEVICE,
    DTYPE,
    INT8,
    THREADS,
    Option,
    check_options,
    option_from,
)
from tinylm.presets import preset_config
from tinylm.runtime.attention_policy import choose_attention, use_attention_kernel
from tinylm.runtime.compile_policy import plan_compile
from tinylm.runtime.device import configure_backends, describe, peak_flops, pick_device
from tinylm.runtime.measure_cache import cpu_model_name
from tinylm.runtime.precision import choose_precision, native_bf16
from tinylm.stages.pretrain.config import PretrainConfig

SECTIONS: tuple[str, ...] = ("matmul", "decode", "train", "loader", "tokenizer")
# `--compile auto` asks what a long training run at the bench's shape would do: compile iff a compiled step measures
# a sure gain, since over enough steps any gain pays the compile back (runtime/compile_policy.py)
LONG_RUN_STEPS = 10**9


@dataclass
class BenchOptions:
    """What `tinylm bench` measures and how: each option field is its flag (cli/commands/bench.py)."""

    preset: str = option_from(PretrainConfig, "preset")
    arch: str = option_from(PretrainConfig, "arch")
    overrides: dict[str, Any] = option_from(PretrainConfig, "overrides")
    batch_size: int = BATCH_SIZE(16)
    seq_len: int | None = option_from(PretrainConfig, "seq_len")  # None = the model's context length
    repeats: int = Option("timed repeats per measurement (the median is reported)", low=1, high=COUNT_LIMIT)(5)
    warmup: int = Option("untimed training steps first", low=0, high=COUNT_LIMIT)(2)
    device: str = DEVICE("auto")
    dtype: str = DTYPE("fp32", note="fp32 keeps the figures comparable across machines; auto is what `tinylm train` "
                                    "would pick")
    threads: int | None = THREADS(None, note="for both sides")
    compile: str = COMPILE("off", note="both models, tinylm per block and transformers whole, as their users do "
                                       "(default: off); auto: as a long `tinylm train` run at this shape decides, by "
                                       "the measured per-step gain (probed once per shape, then cached)")
    attention: str = option_from(PretrainConfig, "attention")  # tinylm's training attention kernel
    reference: bool = Option("skip the transformers measurements", flag="--no-reference")(True)
    decode_tokens: int = Option("new tokens per decode measurement", high=COUNT_LIMIT)(128)
    # decode with int8 weights (what `tinylm generate --int8` runs); the reference stays float
    int8: bool = INT8(False, note="decoding, as `tinylm generate --int8` (transformers keeps float)")
    sections: list[str] = Option("comma list of what to measure", flag="--only", metavar="SECTIONS", choices=SECTIONS,
                                 strict_choices=False)(default_factory=lambda: list(SECTIONS))
    profile: bool = Option("also print where a training step's time goes")(False)
    seed: int = 0  # of the random weights and batches; not a flag (every bench measures the same model)

    def __post_init__(self) -> None:
        if isinstance(self.compile, bool):  # compile=True from Python callers means "on"
            self.compile = "on" if self.compile else "off"
        check_options(self)
        unknown = sorted(set(self.sections) - set(SECTIONS))
        if unknown:
            raise TinyLMError(f"unknown bench section(s) {', '.join(unknown)}: choose from {', '.join(SECTIONS)}")


def _measured(m: Measurement | None) -> dict[str, Any] | None:
    return None if m is None else m.to_dict()


def _median(m: Measurement | None) -> float | None:
    return None if m is None else m.median


def run_bench(opts: BenchOptions, say: Callable[[str], None] = lambda line: None) -> dict[str, Any]:
    """Measure what `opts.sections` name; returns the JSON-ready result (see docs/benchmarks.md for the keys)."""

    if opts.threads:
        torch.set_num_threads(opts.threads)
    device = pick_device(opts.device)
    configure_backends(device)
    config = preset_config(opts.preset, opts.arch, **opts.overrides)
    seq_len = opts.seq_len or config.context_length
    if seq_len > config.context_length:  # its lower bound is the option's own
        raise TinyLMError(f"--seq-len must be <= context_length={config.context_length} (got {seq_len})")
    precision = choose_precision(device, opts.dtype, config, opts.batch_size, seq_len)
    dtype = precision.value
    say(f"dtype: {precision.reason}")

    torch.manual_seed(opts.seed)
    model = build_model(config).to(device)
    n_matmul = (model.flops_per_token(seq_len) - attention_flops_per_token(config, seq_len)) // 6
    result: dict[str, Any] = {
        "options": {**asdict(opts), "sections": list(opts.sections), "seq_len": seq_len, "dtype": DTYPE_NAMES[dtype]},
        "device": describe(device),
        "cpu": cpu_model_name() if device.type == "cpu" else None,
        "cpu_native_bf16": native_bf16() if device.type == "cpu" else None,
        "dtype_reason": precision.reason,
        "threads": torch.get_num_threads(),
        "versions": _versions(),
        "params": model.num_params(),
        "matmul_params": n_matmul,
        "flops_per_token_6n": 6 * n_matmul,
        "flops_per_token": model.flops_per_token(seq_len),
    }
    say("matmul peak ...")
    if "matmul" in opts.sections:
        result["matmul_peak_flops_fp32"] = matmul_peak_flops(device, torch.float32)
        result["matmul_peak_flops_bf16"] = matmul_peak_flops(device, torch.bfloat16)
    result["matmul_peak_flops"] = result.get(f"matmul_peak_flops_{DTYPE_NAMES[dtype]}") or matmul_peak_flops(
        device, dtype)
    # MFU's denominator: on a GPU its datasheet peak (as `tinylm train` reports), on a CPU the measured one
    datasheet = peak_flops(device, dtype) if device.type == "cuda" else None
    peak = datasheet or result["matmul_peak_flops"]
    result["peak_flops"] = peak
    result["peak_flops_source"] = "datasheet" if datasheet else "measured matmul"

    if "decode" in opts.sections:
        say("decode ...")
        result.update(_decode(model, opts, config.context_length, device, dtype))

    if "train" in opts.sections:
        say("training step ...")
        result.update(_train(model, opts, device, dtype, seq_len, peak, n_matmul))

    if "loader" in opts.sections:
        say("data loader ...")

        step_rate = result.get("train_tokens_per_s")
        result.update(loader_cost(opts.batch_size, seq_len, config.vocab_size, opts.repeats,
                                  step_tokens_per_s=step_rate))

    if "tokenizer" in opts.sections:
        say("tokenizer ...")

        result.update(tokenizer_speed(opts.repeats))
    return result


def _versions() -> dict[str, str | None]:
    try:
        import transformers

        hf_version: str | None = transformers.__version__
    except ImportError:
        hf_version = None
    return {"python": platform.python_version(), "torch": torch.__version__, "transformers": hf_version}


def _decoding_model(model: torch.nn.Module, opts: BenchOptions, device: torch.device,
                    dtype: torch.dtype) -> tuple[torch.nn.Module, str]:
    """A copy of the model in the weights' dtype decoding uses: what `tinylm generate` picks under auto.

    With `opts.int8` the copy's linear layers are int8 (`generate --int8`) and the dtype is its activations'.
    """

    twin = copy.deepcopy(model).requires_grad_(False)  # a decode-only copy, as `load_for_generation` makes
    what = "weights"
    if opts.int8:
        quantize_int8(twin)
        what = "activations, int8 weights"
    if opts.dtype == "auto":
        decoding, choice = cast_measuring_decode(twin, device)
        return decoding, choice.reason
    if dtype == torch.float32:
        return twin, f"fp32 {what}: --dtype fp32"
    return twin.to(dtype), f"{DTYPE_NAMES[dtype]} {what}: --dtype {opts.dtype}"


def _decode(model: torch.nn.Module, opts: BenchOptions, context: int, device: torch.device,
            dtype: torch.dtype) -> dict[str, Any]:
    """Greedy cached decoding at batch 1, tinylm's engine vs `transformers` generate, alternating."""

    decoding, reason = _decoding_model(model, opts, device, dtype)
    decode_dtype = next(decoding.parameters()).dtype
    # transformers gets float weights in the same dtype: the decoding copy itself, unless that one is int8
    reference = copy.deepcopy(model).to(decode_dtype) if opts.int8 else decoding
    walls, weights = read_bandwidths(device), weight_bytes(decoding)
    bandwidth = walls["all_threads_bytes_per_s"]
    new_tokens = max(1, min(opts.decode_tokens, context - 8))
    per_token = decode_read_bytes(weights, decoding.config, 8, new_tokens, decode_dtype.itemsize)  # 8-token prompt
    ours: list[float] = []
    theirs: list[float] = []
    reference_error = None
    for _ in range(opts.repeats):
        ours.append(decode_tokens_per_s(decoding, new_tokens=new_tokens, repeats=1))
        if opts.reference and reference_error is None:
            try:
                theirs.append(hf_decode_tokens_per_s(reference, new_tokens=new_tokens, repeats=1))
            except TinyLMError as exc:  # a feature with no transformers counterpart
                reference_error = str(exc)
    mine, ref = Measurement(ours), (Measurement(theirs) if theirs else None)
    return {"decode_new_tokens": new_tokens, "decode_dtype": DTYPE_NAMES[decode_dtype], "decode_int8": opts.int8,
            "decode_dtype_reason": reason,
            "decode_tokens_per_s": mine.median, "decode": mine.to_dict(),
            "reference_decode_tokens_per_s": _median(ref), "reference_decode": _measured(ref),
            "decode_ratio_vs_transformers": ratio(mine, ref), "decode_reference_error": reference_error,
            # batch 1 reads every weight (and the cache so far) per token: bandwidth / those bytes bounds tokens/s
            "decode_weight_bytes": weights, "decode_read_bytes_per_token": per_token,
            "memory_read_bytes_per_s": bandwidth, "memory_read_bytes_per_s_one_thread": walls["one_thread_bytes_per_s"],
            "decode_roofline_tokens_per_s": bandwidth / per_token,
            "decode_share_of_roofline": mine.median / (bandwidth / per_token)}


def _train(model: torch.nn.Module, opts: BenchOptions, device: torch.device, dtype: torch.dtype, seq_len: int,
           peak: float | None, n_matmul: int) -> dict[str, Any]:

    attention = choose_attention(opts.attention, model.config, opts.batch_size, seq_len, dtype, device)
    use_attention_kernel(model, attention.value)
    compiled = plan_compile(opts.compile, LONG_RUN_STEPS, None, model_config=model.config, batch_size=opts.batch_size,
                            seq_len=seq_len, dtype=dtype, device=device, attention=attention.value)
    setup = StepSetup(opts.batch_size, seq_len, device, dtype, compiled.value)
    batch = random_batch(model.config.vocab_size, setup, opts.seed)
    reference_error = None
    hf = None
    if opts.reference:
        try:
            hf = reference_model(model, device)  # before tinylm's first step: the same starting weights
        except TinyLMError as exc:
            reference_error = str(exc)
    steps = {"tinylm": tinylm_step(model, setup, batch)}
    if hf is not None:
        steps["transformers"] = reference_step(hf, setup, batch)
    candidates = {name: (step, setup.tokens) for name, step in steps.items()}
    measured = interleaved(candidates, device, opts.repeats, warmup=opts.warmup)
    mine, ref = measured["tinylm"], measured.get("transformers")

    def mfu(m: Measurement | None, flops: float) -> float | None:
        return None if m is None or not peak else flops * m.median / peak

    out: dict[str, Any] = {
        "train_tokens_per_s": mine.median, "train": mine.to_dict(),
        "reference_train_tokens_per_s": _median(ref), "reference_train": _measured(ref),
        "train_ratio_vs_transformers": ratio(mine, ref), "train_reference_error": reference_error,
        "attention_kernel": attention.value, "attention_reason": attention.reason,
        "compiled": compiled.value, "compile_reason": compiled.reason,
        "reference_model": None if hf is None else type(hf).__name__,
        "mfu": mfu(mine, 6 * n_matmul),
        "mfu_with_attention": mfu(mine, model.flops_per_token(seq_len)),
        "reference_mfu": mfu(ref, 6 * n_matmul),
    }
    if opts.profile:
        out["profile"] = {name: profile_step(step) for name, step in steps.items()}
    return out


def format_table(result: dict[str, Any]) -> str:
    """The human-readable summary `tinylm bench` prints (the JSON holds every sample)."""

    def rate(key: str, unit: str) -> str:
        m = result.get(key)
        return "-" if not m else f"{m['median']:,.0f} {unit} ({m['min']:,.0f}-{m['max']:,.0f})"

    def num(key: str, fmt: str) -> str:
        value = result.get(key)
        return "-" if value is None else format(value, fmt)

    o = result["options"]
    lines = [
        f"tinylm bench: {o['preset']} {o['arch']}, batch {o['batch_size']} x {o['seq_len']}, {o['dtype']}, "
        f"{result['device']}, {result['params']:,} parameters, median of {o['repeats']} (min-max)",
        "",
        "| measure | tinylm | transformers | ratio |",
        "|---|---|---|---|",
    ]
    if "train" in result:
        lines.append(f"| training tokens/s | {rate('train', 'tok/s')} | {rate('reference_train', 'tok/s')} | "
                     f"{num('train_ratio_vs_transformers', '.2f')}x |")
        lines.append(f"| 6N MFU | {num('mfu', '.1%')} | {num('reference_mfu', '.1%')} | |")
    if "decode" in result:
        int8 = ", int8 weights" if result.get("decode_int8") else ""
        lines.append(f"| decode tokens/s (batch 1{int8}) | {rate('decode', 'tok/s')} | "
                     f"{rate('reference_decode', 'tok/s')} | {num('decode_ratio_vs_transformers', '.2f')}x |")
    if "tokenizer_encode" in result:
        lines.append(f"| BPE encode MB/s | {rate('tokenizer_encode', 'MB/s')} | tiktoken "
                     f"{rate('reference_tokenizer_encode', 'MB/s')} | {num('tokenizer_ratio_vs_tiktoken', '.2f')}x |")
        lines.append(f"| BPE encode MB/s | (same) | HF tokenizers {num('hf_tokenizers_encode_mb_per_s', '.1f')} MB/s | "
                     f"{num('tokenizer_ratio_vs_hf_tokenizers', '.2f')}x |")
    lines.append("")
    lines.append(f"dtype: {result['dtype_reason']}")
    if result.get("attention_reason"):
        lines.append(f"attention (training step): {result['attention_reason']}")
    if result.get("compile_reason") and o.get("compile") != "off":
        lines.append(f"compile (both models): {result['compile_reason']}")
    if result.get("decode_dtype_reason"):
        lines.append(f"decode weights: {result['decode_dtype_reason']}")
    if result.get("decode_roofline_tokens_per_s"):
        lines.append(f"decode roofline: {result['decode_read_bytes_per_token'] / 2**20:.1f} MiB read per token "
                     f"({result['decode_weight_bytes'] / 2**20:.1f} of weights, the rest the KV cache) at "
                     f"{result['memory_read_bytes_per_s'] / 1e9:.1f} GB/s read (one thread alone: "
                     f"{result['memory_read_bytes_per_s_one_thread'] / 1e9:.1f}) = "
                     f"{result['decode_roofline_tokens_per_s']:,.0f} tok/s; measured "
                     f"{result['decode_share_of_roofline']:.0%} of it (above 100%: the weights fit in cache)")
    if result.get("cpu"):
        lines.append(f"cpu: {result['cpu']} (native bf16: {result.get('cpu_native_bf16') or 'none'})")
    if "matmul_peak_flops_fp32" in result:
        lines.append(f"matmul peak: fp32 {result['matmul_peak_flops_fp32'] / 1e9:,.0f} GFLOP/s, "
                     f"bf16 {result['matmul_peak_flops_bf16'] / 1e9:,.0f} GFLOP/s")
    if result.get("peak_flops"):
        lines.append(f"MFU denominator: {result['peak_flops'] / 1e9:,.0f} GFLOP/s ({result['peak_flops_source']})")
    if result.get("loader_fraction_of_step") is not None:
        lines.append(f"data loader: {result['loader_fraction_of_step']:.4%} of a training step "
                     f"({result['loader_tokens_per_s']:,.0f} tokens/s)")
    for key in ("train_reference_error", "decode_reference_error", "loader_error", "tokenizer_error"):
        if result.get(key):
            lines.append(f"note ({key}): {result[key]}")
    if "profile" in result:
        lines += ["", *(format_profile(name, prof) for name, prof in result["profile"].items())]
    return "\n".join(lines)

