"""Continuous batching under load: 1, 4 and 16 concurrent streaming clients against `tinylm serve`.

Starts `tinylm serve` as a separate process on 127.0.0.1 (a random `tiny`-preset modern model with a
BPE tokenizer trained on a slice of the standard library), then for each concurrency level runs a
bounded number of streamed completions from asyncio clients (httpx) and prints one JSON object:
aggregate output tokens/s, p50/p99 time to first token and per output token (measured by the
clients, from request to chunk), and the 16-vs-1 throughput ratio. Nothing leaves the loopback.
`scheduler_only` steps the same scheduler in-process without HTTP: the batching gain by itself,
without the per-token cost of events, JSON chunks and sockets. `in_process_decode_tokens_per_s` is
`tinylm generate`'s engine on one prompt, the same model and tokens: one stream through the server
is reported as a fraction of it (`one_stream_vs_in_process`), and, steadier on a shared machine, as
the median ratio of alternating rounds (`one_stream_vs_in_process_alternating`), against the engine
in this process and in a fresh one. This process sets the numerics the
`tinylm` command sets (`MKL_CBWR=AUTO,STRICT`, before torch loads), so the in-process figures and the
server decode under the same MKL mode (one pair without it once gave the in-process engine ~25% more).

    python benchmarks/bench_serve.py [--threads 2] [--requests-per-client 2] [--max-tokens 64]
    python benchmarks/bench_serve.py --threads 1 --intervals 2,4,8,16   # one stream against --stream-interval-ms
"""

from __future__ import annotations  # noqa: I001 (start_env first)

import tinylm.runtime.start_env  # noqa: F401 (before torch loads: the MKL_CBWR the tinylm command, so the server, runs with)
import argparse
import asyncio
import json
import os
import platform
import random
import socket
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import httpx
import torch

from tinylm.checkpoint import load_model, save_checkpoint
from tinylm.data.pystdlib import stdlib_files
from tinylm.inference.sampling import GREEDY
from tinylm.models.factory import build_model
from tinylm.presets import preset_config
from tinylm.runtime import mkl_cbwr
from tinylm.serve.scheduler import Job, Scheduler
from tinylm.tokenizer import train_bpe


def make_checkpoint(root: Path) -> Path:
    texts = [path.read_text(encoding="utf-8", errors="replace") for path in stdlib_files()[:120]]
    tokenizer = train_bpe(texts, vocab_size=4096)
    config = preset_config("tiny", vocab_size=tokenizer.vocab_size)
    torch.manual_seed(0)
    save_checkpoint(root / "bench", 1, build_model(config), config,
                    tokenizer_file=tokenizer.save(root / "tokenizer.json"))
    return root / "bench"


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def start_server(checkpoint: Path, port: int, threads: int,
                 stream_interval_ms: float | None = None) -> subprocess.Popen:
    command = [sys.executable, "-m", "tinylm", "serve", "--checkpoint", str(checkpoint), "--port", str(port),
               "--threads", str(threads), "--model-name", "bench"]
    if stream_interval_ms is not None:
        command += ["--stream-interval-ms", f"{stream_interval_ms:g}"]
    server = subprocess.Popen(command, stderr=subprocess.PIPE, text=True)
    banner = server.stderr.readline()
    if "serving" not in banner:
        server.kill()
        raise SystemExit(f"the server did not start: {banner}")
    return server


async def one_stream(client: httpx.AsyncClient, url: str, prompt: list[int], max_tokens: int) -> dict:
    """One streamed completion, read as raw bytes (the client must cost the shared CPUs as little as it can):
    the first chunk's arrival is the first token (completion chunks carry text, or the ending), and the
    token count comes from the closing usage chunk."""
    body = {"model": "bench", "prompt": prompt, "max_tokens": max_tokens, "temperature": 0, "stream": True,
            "stream_options": {"include_usage": True}}
    start = time.perf_counter()
    first = last = None
    tail = b""
    async with client.stream("POST", url + "/v1/completions", json=body) as response:
        async for block in response.aiter_bytes():
            last = time.perf_counter()
            first = first or last
            tail = (tail + block)[-4096:]
    usage_line = next(line for line in reversed(tail.split(b"\n\n")) if b'"usage"' in line)
    tokens = json.loads(usage_line.removeprefix(b"data: "))["usage"]["completion_tokens"]
    return {"ttft": (first or start) - start, "tokens": tokens,
            "tpot": (last - first) / (tokens - 1) if first and tokens > 1 else None, "end": time.perf_counter()}


def random_prompts(n: int, length: int, seed: int) -> list[list[int]]:
    rng = random.Random(seed)
    return [[rng.randrange(1, 4000) for _ in range(length)] for _ in range(n)]


def scheduler_only(checkpoint: Path, clients: int, max_tokens: int, prompt_len: int) -> float:
    """Output tokens/s of `clients` requests stepped together by the scheduler itself, in this process."""
    model, _, _ = load_model(checkpoint)
    scheduler = Scheduler(model, max_slots=16)
    for prompt in random_prompts(clients, prompt_len, clients):
        scheduler.submit(Job(prompt, max_tokens, GREEDY, lambda _: None))
    start = time.perf_counter()
    with torch.inference_mode():
        while scheduler.waiting or scheduler.prefilling or scheduler.running:
            scheduler.admit()
            scheduler.step()
    return round(scheduler.metrics.generation_tokens / (time.perf_counter() - start), 1)


def in_process(checkpoint: Path, max_tokens: int, prompt_len: int, repeats: int = 8, rounds: int = 3) -> float:
    """Output tokens/s of `tinylm generate`'s engine on one prompt (greedy, batch 1): what one stream should near.
    The best of `rounds` rounds of `repeats` prompts, so a busy moment does not flatter the server's ratio."""
    from tinylm.inference.engine import Engine

    model, _, _ = load_model(checkpoint)
    engine = Engine(model.eval())
    prompts = random_prompts(repeats + 1, prompt_len, 1)
    engine.generate(prompts[:1], max_tokens, GREEDY)  # warm-up
    best = float("inf")
    for _ in range(rounds):
        start = time.perf_counter()
        for prompt in prompts[1:]:
            engine.generate([prompt], max_tokens, GREEDY)
        best = min(best, time.perf_counter() - start)
    return round(repeats * max_tokens / best, 1)


async def load(url: str, clients: int, requests: int, max_tokens: int, prompt_len: int) -> dict:
    prompts = random_prompts(requests, prompt_len, clients)

    async def client_loop(client: httpx.AsyncClient, mine: list[list[int]]) -> list[dict]:
        return [await one_stream(client, url, prompt, max_tokens) for prompt in mine]

    limits = httpx.Limits(max_connections=clients + 4)
    async with httpx.AsyncClient(timeout=300, limits=limits) as client:
        await one_stream(client, url, prompts[0], 4)  # warm-up
        start = time.perf_counter()
        results = await asyncio.gather(*(client_loop(client, prompts[i::clients]) for i in range(clients)))
    runs = [r for per in results for r in per]
    wall = max(r["end"] for r in runs) - start
    ttft = sorted(r["ttft"] for r in runs)
    tpot = sorted(r["tpot"] for r in runs if r["tpot"] is not None)
    return {"clients": clients, "requests": len(runs), "output_tokens": sum(r["tokens"] for r in runs),
            "wall_s": round(wall, 3), "output_tokens_per_s": round(sum(r["tokens"] for r in runs) / wall, 1),
            "ttft_p50_ms": round(1000 * percentile(ttft, 50), 2), "ttft_p99_ms": round(1000 * percentile(ttft, 99), 2),
            "tpot_p50_ms": round(1000 * percentile(tpot, 50), 2), "tpot_p99_ms": round(1000 * percentile(tpot, 99), 2)}


async def served_round(url: str, prompts: list[list[int]], max_tokens: int) -> tuple[float, float]:
    """One stream at a time through the server, after a short warm-up request: tokens per second over the round's
    wall time (time to first token included, as a client sees it) and the median time to first token."""
    async with httpx.AsyncClient(timeout=300) as client:
        await one_stream(client, url, prompts[0], 4)
        start, tokens, ttft = time.perf_counter(), 0, []
        for prompt in prompts:
            result = await one_stream(client, url, prompt, max_tokens)
            tokens, ttft = tokens + result["tokens"], [*ttft, result["ttft"]]
        return tokens / (time.perf_counter() - start), statistics.median(ttft)


def alternating(url: str, checkpoint: Path, max_tokens: int, prompt_len: int, threads: int, rounds: int = 7) -> dict:
    """One stream through the server against the in-process engine, in alternating rounds of the same 8 prompts.

    Single runs on a shared machine move by a third; rounds side by side see the same moment, so the
    median of the per-round ratios is what the server costs one stream. Each rate is tokens over the
    round's wall time (time to first token included, as a client sees it). The engine runs twice per
    round: in this process, and in a fresh process that only loaded the checkpoint, as `tinylm generate`
    and the server's engine process do, so a history of this process (a tokenizer trained, HTTP load)
    cannot be what sets the reference.
    """
    from tinylm.inference.engine import Engine

    model, _, _ = load_model(checkpoint)
    engine = Engine(model.eval())
    prompts = random_prompts(8, prompt_len, 7)
    engine.generate(prompts[:1], max_tokens, GREEDY)
    worker = subprocess.Popen([sys.executable, __file__, "--engine-worker", str(checkpoint), "--max-tokens",
                               str(max_tokens), "--prompt-tokens", str(prompt_len), "--threads", str(threads)],
                              stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)

    def fresh() -> float:
        worker.stdin.write("round\n")
        worker.stdin.flush()
        return float(worker.stdout.readline())

    try:
        fresh()  # its warm-up
        rows = [(asyncio.run(served_round(url, prompts, max_tokens))[0], engine_round(engine, prompts, max_tokens),
                 fresh()) for _ in range(rounds)]
    finally:
        worker.stdin.close()
        worker.wait(60)

    def ratio(column: int) -> dict:
        ratios = sorted(row[0] / row[column] for row in rows)
        return {"median": round(statistics.median(ratios), 3), "min": round(ratios[0], 3),
                "max": round(ratios[-1], 3)}

    return {"rounds": rounds, "server_tokens_per_s": [round(r[0], 1) for r in rows],
            "in_process_tokens_per_s": [round(r[1], 1) for r in rows],
            "fresh_process_tokens_per_s": [round(r[2], 1) for r in rows],
            "vs_this_process": ratio(1), "vs_a_fresh_process": ratio(2)}


def interval_sweep(checkpoint: Path, intervals_ms: list[float], max_tokens: int, prompt_len: int, threads: int,
                   rounds: int = 12) -> dict:
    """One stream through servers that differ only in --stream-interval-ms, each round bracketed by two rounds of
    the in-process engine (their mean is the round's reference); the order of the servers alternates by round.
    All servers run at once; the idle ones wait on their pipes."""
    from tinylm.inference.engine import Engine

    servers = {}
    for interval in intervals_ms:
        port = free_port()
        servers[interval] = (start_server(checkpoint, port, threads, interval), f"http://127.0.0.1:{port}")
    model, _, _ = load_model(checkpoint)
    engine = Engine(model.eval())
    prompts = random_prompts(8, prompt_len, 7)
    engine_round(engine, prompts, max_tokens)

    ratios: dict[float, list[float]] = {interval: [] for interval in intervals_ms}
    ttfts: dict[float, list[float]] = {interval: [] for interval in intervals_ms}
    try:
        for _, url in servers.values():
            asyncio.run(served_round(url, prompts, max_tokens))  # warm-up
        for round_number in range(rounds):
            for interval in intervals_ms if round_number % 2 == 0 else intervals_ms[::-1]:
                before = engine_round(engine, prompts, max_tokens)
                rate, ttft = asyncio.run(served_round(servers[interval][1], prompts, max_tokens))
                after = engine_round(engine, prompts, max_tokens)
                ratios[interval].append(rate / ((before + after) / 2))
                ttfts[interval].append(ttft)
    finally:
        for server, _ in servers.values():
            server.terminate()
            server.wait(60)
    return {"rounds": rounds, "by_interval_ms": [
        {"stream_interval_ms": interval,
         "one_stream_vs_in_process_median": round(statistics.median(ratios[interval]), 3),
         "ratios": [round(r, 3) for r in ratios[interval]],
         "ttft_p50_ms": round(1000 * statistics.median(ttfts[interval]), 2)} for interval in intervals_ms]}


def engine_round(engine: object, prompts: list[list[int]], max_tokens: int) -> float:
    start = time.perf_counter()
    tokens = sum(len(engine.generate([p], max_tokens, GREEDY)[0]) for p in prompts)  # type: ignore[attr-defined]
    return tokens / (time.perf_counter() - start)


def engine_worker(checkpoint: Path, max_tokens: int, prompt_len: int, threads: int) -> None:
    """--engine-worker: load the checkpoint, then answer each line on stdin with one round's tokens/s."""
    from tinylm.inference.engine import Engine

    torch.set_num_threads(threads)
    model, _, _ = load_model(checkpoint)
    engine = Engine(model.eval())
    prompts = random_prompts(8, prompt_len, 7)
    engine.generate(prompts[:1], max_tokens, GREEDY)
    for _ in sys.stdin:
        print(engine_round(engine, prompts, max_tokens), flush=True)


def percentile(sorted_values: list[float], q: float) -> float:
    if not sorted_values:
        return float("nan")
    if len(sorted_values) == 1:
        return sorted_values[0]
    return statistics.quantiles(sorted_values, n=100, method="inclusive")[min(98, max(0, int(q) - 1))]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--threads", type=int, default=2, help="torch threads of the server (default 2)")
    parser.add_argument("--requests-per-client", type=int, default=2, help="(a level runs at least 8 requests)")
    parser.add_argument("--max-tokens", type=int, default=64)
    parser.add_argument("--prompt-tokens", type=int, default=32)
    parser.add_argument("--intervals", default=None, metavar="MS,MS,...",
                        help="only compare one stream through servers with these --stream-interval-ms values")
    parser.add_argument("--engine-worker", type=Path, default=None, help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.engine_worker is not None:
        engine_worker(args.engine_worker, args.max_tokens, args.prompt_tokens, args.threads)
        return
    if args.intervals is not None:
        torch.set_num_threads(args.threads)
        with tempfile.TemporaryDirectory() as tmp:
            sweep = interval_sweep(make_checkpoint(Path(tmp)), [float(v) for v in args.intervals.split(",")],
                                   args.max_tokens, args.prompt_tokens, args.threads)
        print(json.dumps({"model": "tiny preset (modern, random weights), fp32", "server_threads": args.threads,
                          "cpu_count": os.cpu_count(), "machine": platform.processor() or platform.machine(),
                          "max_tokens": args.max_tokens, "prompt_tokens": args.prompt_tokens, **sweep}, indent=2))
        return
    with tempfile.TemporaryDirectory() as tmp:
        checkpoint = make_checkpoint(Path(tmp))
        port = free_port()
        server = start_server(checkpoint, port, args.threads)
        try:
            url = f"http://127.0.0.1:{port}"
            levels = [asyncio.run(load(url, c, max(8, c * args.requests_per_client), args.max_tokens,
                                       args.prompt_tokens)) for c in (1, 4, 16)]
            torch.set_num_threads(args.threads)
            paired = alternating(url, checkpoint, args.max_tokens, args.prompt_tokens, args.threads)
        finally:
            server.terminate()
            server.wait(60)
        torch.set_num_threads(args.threads)
        alone = {c: scheduler_only(checkpoint, c, args.max_tokens, args.prompt_tokens) for c in (1, 4, 16)}
        engine = in_process(checkpoint, args.max_tokens, args.prompt_tokens)
    single, sixteen = levels[0]["output_tokens_per_s"], levels[-1]["output_tokens_per_s"]
    print(json.dumps({
        "model": "tiny preset (modern, random weights), fp32", "server_threads": args.threads,
        "cpu_count": os.cpu_count(), "machine": platform.processor() or platform.machine(),
        "torch": torch.__version__, "numerics": mkl_cbwr.describe(), "max_tokens": args.max_tokens,
        "prompt_tokens": args.prompt_tokens, "levels": levels, "throughput_16_vs_1": round(sixteen / single, 2),
        "scheduler_only": {"output_tokens_per_s": alone, "throughput_16_vs_1": round(alone[16] / alone[1], 2)},
        "in_process_decode_tokens_per_s": engine, "one_stream_vs_in_process": round(single / engine, 3),
        "one_stream_vs_in_process_alternating": paired,
    }, indent=2))


if __name__ == "__main__":
    main()
