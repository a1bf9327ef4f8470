"""A tinylm checkpoint in llama.cpp: what each GGUF type costs in agreement and size, and decode speed side by side.

Prints one JSON object. For every type (f32, f16, bf16, q8_0, q4_0): the file size, and, teacher-forced
on tinylm's own float32 greedy continuations of a few prompts, how often llama.cpp ranks tinylm's
token first (match rate) and the largest |log p| difference over the whole vocabulary (max log-prob
gap). Then greedy decode speed at batch 1: llama.cpp (node-llama-cpp's CPU build, its default f16 KV
cache, THREADS threads) on each file, and tinylm's engine as `tinylm generate` runs it at each number
type (--dtype fp32, --dtype bf16, --int8, and the policy's own pick), on the same prompt, one decode
of each per round, rounds alternating, best of --repeats. `ratio_same_type` is tinylm's tokens/s over
llama.cpp's at the types both have (f32, bf16, tinylm's int8 rows against q8_0). Every figure comes
with the bytes one token reads (the weights and the mean KV cache) and its share of the measured
memory bandwidth at that thread count (`bandwidth`: one thread and all); each tinylm type says whether
its greedy tokens equal the model's own forward in that dtype (`identical_to_reference_path`).

    python benchmarks/bench_gguf.py --checkpoint runs/tiny-modern [--threads 1] [--new-tokens 128]
    python benchmarks/bench_gguf.py --checkpoint runs/tiny-modern --random-preset small --agree-tokens 16

`--random-preset` measures a modern model of that preset with random weights (speed does not depend
on them) and the checkpoint's tokenizer.

Needs node-llama-cpp (`make setup` installs it into .venv/llama-cpp). One thread each by default: on a
2-core machine llama.cpp's two workers spin against node's own thread, and measured 128 tokens in ~2 s
instead of 0.1 s.
"""

from __future__ import annotations

import argparse
import json
import platform
import sys
import tempfile
import time
from pathlib import Path

import torch

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO / "tests"))

from gguf_support import llama_cpp, llama_cpp_missing, tinylm_greedy, tinylm_logprobs  # noqa: E402
from tinylm.bench.memory_bandwidth import decode_read_bytes, read_bandwidths, weight_bytes  # noqa: E402
from tinylm.inference.engine import Engine  # noqa: E402
from tinylm.inference.loading import load_for_generation  # noqa: E402
from tinylm.inference.sampling import GREEDY  # noqa: E402
from tinylm.interop.gguf_export import export_gguf  # noqa: E402
from tinylm.runtime.precision import native_bf16  # noqa: E402

PROMPTS = ["def main(", "The history of", "import os\nimport sys\n", "for i in range(10):"]
QUANTS = ("f32", "f16", "bf16", "q8_0", "q4_0")
SAME_TYPE = (("f32", "f32", "f32"), ("bf16", "bf16", "bf16"), ("int8_vs_q8_0", "int8", "q8_0"))  # key, tinylm, gguf


def agreement(file: Path, checkpoint: Path, prompts: list[list[int]], n: int, context: int) -> dict[str, float]:
    matches = total = 0
    gap = 0.0
    for prompt in prompts:
        ours = tinylm_greedy(checkpoint, prompt, n)
        ids = prompt + ours
        rows = llama_cpp(file, [{"kind": "logprobs", "ids": ids, "from": len(prompt)}], context=context)
        reference = tinylm_logprobs(checkpoint, ids)[len(prompt) - 1:]
        for position, row in enumerate(rows["answers"][0]["rows"][:len(ours)]):
            theirs = {int(k): float(v) for k, v in row.items()}
            matches += max(theirs, key=theirs.get) == ours[position]
            total += 1
            gap = max(gap, max(abs(v - reference[position, k].item()) for k, v in theirs.items()))
    return {"match_rate": round(matches / total, 4), "max_logprob_gap": round(gap, 5), "positions": total}


def llama_cpp_seconds(file: Path, prompt: list[int], n: int, threads: int, context: int) -> tuple[float, int]:
    """(seconds, tokens) of one greedy decode in llama.cpp, timed inside the probe (loading excluded)."""
    task = {"kind": "greedy", "ids": prompt, "n": n, "through_eog": True}
    request = {"context": context, "threads": threads, "kv_type": "F16", "flash_attention": "auto"}
    answer = llama_cpp(file, [task], **request)["answers"][0]
    return answer["seconds"], len(answer["tokens"])


def tinylm_models(checkpoint: Path) -> dict[str, tuple[torch.nn.Module, dict]]:
    """tinylm's decoding copies, per number type: what `tinylm generate` runs with --dtype fp32, --dtype bf16 and
    --int8 (int8 rows with bf16 activations where the CPU multiplies bf16 natively: PyTorch's int8 kernel then
    runs), and with nothing asked (the policy's pick). (model, its metadata: decode_dtype, decode_precision)."""
    int8_dtype = torch.bfloat16 if native_bf16() else torch.float32
    models = {}
    for name, dtype, int8 in (("f32", torch.float32, False), ("bf16", torch.bfloat16, False),
                              ("int8", int8_dtype, True), ("auto", None, False)):
        model, _, meta = load_for_generation(str(checkpoint), int8=int8, device="cpu", dtype=dtype)
        models[name] = (model, meta)
    return models


def tinylm_seconds(engine: Engine, prompt: list[int], n: int) -> float:
    start = time.perf_counter()
    engine.generate([prompt], n, GREEDY)
    return time.perf_counter() - start


def identical_to_reference(engine: Engine, prompt: list[int], n: int) -> bool:
    """The engine's greedy tokens equal its model's own forward (`Engine(fast=False)`) in the same dtype."""
    return engine.generate([prompt], n, GREEDY) == Engine(engine.model, fast=False).generate([prompt], n, GREEDY)


def speeds(checkpoint: Path, files: dict[str, Path], prompt: list[int], n: int, threads: int, context: int,
           repeats: int) -> tuple[dict[str, float], dict[str, dict]]:
    """Best tokens/s of every llama.cpp file and every tinylm copy, the runs alternating (one of each per round)."""
    models = tinylm_models(checkpoint)
    engines = {name: Engine(model) for name, (model, _) in models.items()}
    for engine in engines.values():
        engine.generate([prompt], 16, GREEDY)  # warm-up
    theirs = {quant: 0.0 for quant in files}
    ours = {name: 0.0 for name in engines}
    for _ in range(repeats):
        for quant, file in files.items():
            seconds, tokens = llama_cpp_seconds(file, prompt, n, threads, context)
            theirs[quant] = max(theirs[quant], tokens / seconds)
        for name, engine in engines.items():
            ours[name] = max(ours[name], n / tinylm_seconds(engine, prompt, n))
    tinylm = {name: {"tokens_per_s": round(ours[name], 1), "precision": str(models[name][1]["decode_precision"]),
                     "weight_bytes": weight_bytes(models[name][0]),
                     "cache_element_bytes": models[name][1]["decode_dtype"].itemsize,
                     "identical_to_reference_path": identical_to_reference(engines[name], prompt, n)}
              for name in engines}
    return theirs, tinylm


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--checkpoint", default="runs/tiny-modern")
    parser.add_argument("--threads", type=int, default=1)
    parser.add_argument("--new-tokens", type=int, default=128)
    parser.add_argument("--agree-tokens", type=int, default=48, help="teacher-forced tokens per prompt (0: skip)")
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--random-preset", help="random weights of this modern preset, the checkpoint's tokenizer")
    parser.add_argument("--types", default=",".join(QUANTS), help="the GGUF types to export and decode (f32 needed)")
    args = parser.parse_args()
    quants = [q for q in QUANTS if q in args.types.split(",")]
    if "f32" not in quants:
        raise SystemExit(f"bench_gguf: --types must include f32 and may name {', '.join(QUANTS)}")
    missing = llama_cpp_missing()
    if missing:
        raise SystemExit(f"bench_gguf: {missing}")
    torch.set_num_threads(args.threads)

    from tinylm.checkpoint.read import checkpoint_model_config, resolve_checkpoint
    from tinylm.tokenizer.load import load_tokenizer

    checkpoint = resolve_checkpoint(args.checkpoint)
    work = tempfile.TemporaryDirectory()
    if args.random_preset:
        checkpoint = random_preset_checkpoint(args.random_preset, checkpoint / "tokenizer.json", Path(work.name))
    config = checkpoint_model_config(checkpoint)
    tokenizer = load_tokenizer(checkpoint / "tokenizer.json")
    prompts = [tokenizer.encode(text) for text in PROMPTS]
    context = config.context_length
    speed_prompt = prompts[0]
    n = min(args.new_tokens, context - len(speed_prompt))
    walls = read_bandwidths(torch.device("cpu"))
    wall = walls["one_thread_bytes_per_s"] if args.threads == 1 else walls["all_threads_bytes_per_s"]
    result: dict = {"checkpoint": str(checkpoint), "machine": platform.processor() or platform.machine(),
                    "threads": args.threads, "prompt_tokens": len(speed_prompt), "new_tokens": n, "bandwidth": walls,
                    "types": {}}

    def bytes_per_token(weights: int, kv_element_bytes: int) -> float:
        return decode_read_bytes(weights, config, len(speed_prompt), n, kv_element_bytes)

    with tempfile.TemporaryDirectory() as tmp:
        files, sizes = {}, {}
        for quant in quants:
            done = export_gguf(checkpoint, Path(tmp) / quant, quant)
            files[quant], sizes[quant] = done.file, done.bytes
            result["types"][quant] = {"architecture": done.architecture, "mib": round(done.bytes / 2**20, 3)}
            if args.agree_tokens > 0:  # 0: speed only
                result["types"][quant].update(agreement(done.file, checkpoint, prompts, args.agree_tokens, context))
        theirs, ours = speeds(checkpoint, files, speed_prompt, n, args.threads, context, args.repeats)
    for quant, row in result["types"].items():
        row["llama_cpp_tokens_per_s"] = round(theirs[quant], 1)
        # the file is its tensors and a little metadata; llama.cpp's cache is f16 (2 bytes)
        row["bytes_per_token"] = round(bytes_per_token(sizes[quant], 2))
        row["share_of_bandwidth"] = round(theirs[quant] * row["bytes_per_token"] / wall, 3)
    for row in ours.values():
        row["bytes_per_token"] = round(bytes_per_token(row["weight_bytes"], row.pop("cache_element_bytes")))
        row["share_of_bandwidth"] = round(row["tokens_per_s"] * row["bytes_per_token"] / wall, 3)
    result["tinylm"] = ours
    result["tinylm_generate_tokens_per_s"] = ours["auto"]["tokens_per_s"]
    result["tinylm_decode_precision"] = ours["auto"]["precision"]
    result["llama_cpp_f32_vs_tinylm"] = round(theirs["f32"] / ours["auto"]["tokens_per_s"], 2)
    # at equal number types: tinylm's tokens/s over llama.cpp's, from the same alternating rounds
    result["ratio_same_type"] = {key: round(ours[mine]["tokens_per_s"] / theirs[quant], 3)
                                 for key, mine, quant in SAME_TYPE if quant in theirs}
    print(json.dumps(result, indent=2))
    work.cleanup()


def random_preset_checkpoint(preset: str, tokenizer_file: Path, root: Path) -> Path:
    from tinylm.checkpoint import save_checkpoint
    from tinylm.models.factory import build_model
    from tinylm.presets import preset_config
    from tinylm.tokenizer.load import load_tokenizer

    config = preset_config(preset, arch="modern", vocab_size=load_tokenizer(tokenizer_file).n_vocab)
    torch.manual_seed(0)
    return save_checkpoint(root / preset, 1, build_model(config).eval(), config, tokenizer_file=tokenizer_file)


if __name__ == "__main__":
    main()
