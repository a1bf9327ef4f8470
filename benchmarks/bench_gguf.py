"""A tinylm checkpoint in llama.cpp: what each GGUF type costs in agreement and size, and decode speed side by side.

Prints one JSON object. For every type (f32, f16, bf16, q8_0, q4_0): the file size, and, teacher-forced
on tinylm's own float32 greedy continuations of a few prompts, how often llama.cpp ranks tinylm's
token first (match rate) and the largest |log p| difference over the whole vocabulary (max log-prob
gap). Then greedy decode speed at batch 1: llama.cpp (node-llama-cpp's CPU build, its default f16 KV
cache, THREADS threads) on each file, next to tinylm's engine as `tinylm generate` runs it (the dtype
it measures and picks, printed) on the same prompt, in the same run, one after the other.

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
from tinylm.inference.engine import Engine  # noqa: E402
from tinylm.inference.loading import load_for_generation  # noqa: E402
from tinylm.inference.sampling import GREEDY  # noqa: E402
from tinylm.interop.gguf_export import export_gguf  # noqa: E402

PROMPTS = ["def main(", "The history of", "import os\nimport sys\n", "for i in range(10):"]
QUANTS = ("f32", "f16", "bf16", "q8_0", "q4_0")


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


def llama_cpp_tokens_per_s(file: Path, prompt: list[int], n: int, threads: int, context: int, repeats: int) -> float:
    task = {"kind": "greedy", "ids": prompt, "n": n, "through_eog": True}
    request = {"context": context, "threads": threads, "kv_type": "F16", "flash_attention": "auto"}
    best = min(llama_cpp(file, [task] * repeats, **request)["answers"], key=lambda a: a["seconds"])
    return len(best["tokens"]) / best["seconds"]


def tinylm_tokens_per_s(checkpoint: Path, prompt: list[int], n: int, repeats: int) -> tuple[float, str]:
    model, _, meta = load_for_generation(str(checkpoint), device="cpu")
    engine = Engine(model)
    engine.generate([prompt], 16, GREEDY)  # warm-up
    best = float("inf")
    for _ in range(repeats):
        start = time.perf_counter()
        engine.generate([prompt], n, GREEDY)
        best = min(best, time.perf_counter() - start)
    return n / best, str(meta.get("decode_precision"))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--checkpoint", default="runs/tiny-modern")
    parser.add_argument("--threads", type=int, default=1)
    parser.add_argument("--new-tokens", type=int, default=128)
    parser.add_argument("--agree-tokens", type=int, default=48)
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--random-preset", help="random weights of this modern preset, the checkpoint's tokenizer")
    args = parser.parse_args()
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
    result: dict = {"checkpoint": str(checkpoint), "machine": platform.processor() or platform.machine(),
                    "threads": args.threads, "new_tokens": n, "types": {}}
    with tempfile.TemporaryDirectory() as tmp:
        for quant in QUANTS:
            done = export_gguf(checkpoint, Path(tmp) / quant, quant)
            row = {"architecture": done.architecture, "mib": round(done.bytes / 2**20, 3),
                   **agreement(done.file, checkpoint, prompts, args.agree_tokens, context)}
            row["llama_cpp_tokens_per_s"] = round(llama_cpp_tokens_per_s(done.file, speed_prompt, n, args.threads,
                                                                         context, args.repeats), 1)
            result["types"][quant] = row
    speed, precision = tinylm_tokens_per_s(checkpoint, speed_prompt, n, args.repeats)
    result["tinylm_generate_tokens_per_s"] = round(speed, 1)
    result["tinylm_decode_precision"] = precision
    result["llama_cpp_f32_vs_tinylm"] = round(result["types"]["f32"]["llama_cpp_tokens_per_s"] / speed, 2)
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
