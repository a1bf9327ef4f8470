"""Decode speed of tinylm's generation engine, next to Hugging Face `transformers` in the same process.

Prints one JSON object: greedy decode tokens/s at batch 1 for the tiny and 13m presets (cached and
uncached), `transformers` `generate` on the same weights and the ratio, uncached-vs-cached speedup
at 256 and 1024 generated tokens, int8 speed and linear weight memory, and speculative decoding's
acceptance rate and speedup. Weights are random (no training needed); speed does not depend on them.

    python benchmarks/bench_decode.py [--quick] [--threads N]
"""

from __future__ import annotations

import argparse
import copy
import json
import platform
import time

import torch

from tinylm.bench.decode import decode_tokens_per_s, hf_decode_tokens_per_s
from tinylm.inference.int8 import linear_weight_bytes, quantize_int8
from tinylm.inference.sampling import GREEDY
from tinylm.inference.speculative import SpeculativeDecoder, SpeculativeStats
from tinylm.models.factory import build_model
from tinylm.presets import preset_config


def _model(preset: str, arch: str = "modern", **overrides) -> torch.nn.Module:
    torch.manual_seed(0)
    return build_model(preset_config(preset, arch=arch, **overrides)).eval()


def preset_speeds(preset: str, new_tokens: int, repeats: int) -> dict:
    model = _model(preset)
    new_tokens = min(new_tokens, model.config.context_length - 8)  # prompt + output within the window
    cached = decode_tokens_per_s(model, new_tokens, repeats=repeats)
    generic = decode_tokens_per_s(model, new_tokens, fast=False, repeats=repeats)
    uncached = decode_tokens_per_s(model, new_tokens, use_cache=False, repeats=1)
    hf = hf_decode_tokens_per_s(model, new_tokens, repeats=repeats)
    classic = decode_tokens_per_s(_model(preset, "classic"), new_tokens, repeats=1)
    return {
        "new_tokens": new_tokens,
        "cached_tokens_per_s": round(cached, 1),
        "cached_model_path_tokens_per_s": round(generic, 1),
        "uncached_tokens_per_s": round(uncached, 1),
        "classic_uncached_tokens_per_s": round(classic, 1),
        "transformers_tokens_per_s": round(hf, 1),
        "ratio_vs_transformers": round(cached / hf, 2),
    }


def cache_speedup(new_tokens: int) -> dict:
    model = _model("tiny", context_length=max(256, new_tokens + 16))
    cached = decode_tokens_per_s(model, new_tokens, repeats=2)
    uncached = decode_tokens_per_s(model, new_tokens, use_cache=False, repeats=1)
    return {"cached_tokens_per_s": round(cached, 1), "uncached_tokens_per_s": round(uncached, 1),
            "speedup": round(cached / uncached, 2)}


def int8_figures(preset: str, new_tokens: int, repeats: int) -> dict:
    model = _model(preset)
    new_tokens = min(new_tokens, model.config.context_length - 8)
    quantized = quantize_int8(copy.deepcopy(model))
    fp32_speed = decode_tokens_per_s(model, new_tokens, repeats=repeats)
    int8_speed = decode_tokens_per_s(quantized, new_tokens, repeats=repeats)
    return {
        "fp32_tokens_per_s": round(fp32_speed, 1),
        "int8_tokens_per_s": round(int8_speed, 1),
        "speed_ratio": round(int8_speed / fp32_speed, 2),
        "linear_weight_bytes_fp32": linear_weight_bytes(model),
        "linear_weight_bytes_int8": linear_weight_bytes(quantized),
        "memory_ratio": round(linear_weight_bytes(quantized) / linear_weight_bytes(model), 3),
    }


def speculative_figures(new_tokens: int, k: int) -> dict:
    """Target: the `small` preset. Draft: its own first block (same embeddings and head, 1/8 of the depth).

    With random weights the residual stream is dominated by the embedding, so the shallow draft agrees
    with the target often; with trained models acceptance depends on how well the draft learned.
    """
    target = _model("small").requires_grad_(False)  # inference weights, as `tinylm generate` loads them
    draft = build_model(target.config.replace(n_blocks=1)).eval().requires_grad_(False)
    draft.load_state_dict({k: v for k, v in target.state_dict().items()
                           if not k.startswith("blocks.") or k.startswith("blocks.0.")})
    prompt = [1, 2, 3, 4, 5, 6, 7, 8]
    result = {"target": "small (8 blocks)", "draft": "small's first block", "k": k, "new_tokens": new_tokens}
    plain = decode_tokens_per_s(target, new_tokens, repeats=2)
    decoder = SpeculativeDecoder(target, draft, k)  # built once, outside the timing, as `generate` builds it
    for name, params in (("greedy", GREEDY),):
        stats = SpeculativeStats()
        list(decoder.stream(prompt, 16, sampling=params))  # warm-up
        start = time.perf_counter()
        list(decoder.stream(prompt, new_tokens, sampling=params, stats=stats))
        speed = new_tokens / (time.perf_counter() - start)
        result[name] = {"acceptance_rate": round(stats.acceptance_rate, 3),
                        "tokens_per_target_pass": round(stats.tokens_per_target_pass, 2),
                        "tokens_per_s": round(speed, 1), "target_alone_tokens_per_s": round(plain, 1),
                        "speedup": round(speed / plain, 2)}
    return result


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--quick", action="store_true", help="fewer tokens and repeats (a smoke run)")
    parser.add_argument("--threads", type=int, default=None, help="torch threads (default: torch's choice)")
    args = parser.parse_args()
    if args.threads:
        torch.set_num_threads(args.threads)
    n, repeats = (64, 1) if args.quick else (256, 3)
    report = {
        "machine": {"cpu": platform.processor() or platform.machine(), "torch": torch.__version__,
                    "threads": torch.get_num_threads()},
        "tiny": preset_speeds("tiny", n, repeats),
        "13m": preset_speeds("13m", n, repeats),
        "uncached_vs_cached": {str(t): cache_speedup(t) for t in ((64,) if args.quick else (256, 1024))},
        "int8": {p: int8_figures(p, n, repeats) for p in ("tiny", "13m")},
        "speculative": speculative_figures(n, k=4),
    }
    print(json.dumps(report, indent=2))


if __name__ == "__main__":
    main()
