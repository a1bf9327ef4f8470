"""Tokenizer and prepare speed on the embedded corpus; prints one JSON object.

    python benchmarks/bench_tokenize.py [--vocab-size 4096] [--repeats 3]

Measures, on the full `pystdlib` corpus: BPE training time (Hugging Face `tokenizers`), encoding
throughput of the same BPE with `tokenizers` (its own thread pool), with a `tiktoken.Encoding` built
from the same merges (2 threads), and with tinylm's `Tokenizer.encode_arrays` (what prepare runs), whether
all three give identical ids, and the wall time of a whole fresh `prepare_dataset`. Encoding figures
are the best of `--repeats` runs, since other processes on a small machine only ever slow a run down.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import tempfile
import time
from pathlib import Path


def best_rate(fn, n_bytes: int, repeats: int) -> float:
    """MB/s of the fastest of `repeats` calls of `fn`."""
    best = float("inf")
    for _ in range(repeats):
        start = time.perf_counter()
        fn()
        best = min(best, time.perf_counter() - start)
    return n_bytes / best / 1e6


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--vocab-size", type=int, default=4096)
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--threads", type=int, default=2)
    args = parser.parse_args()

    from tokenizers import Tokenizer as HFTokenizer

    from tinylm.data.corpus import open_corpus
    from tinylm.data.prepare import prepare_dataset
    from tinylm.tokenizer import train_bpe
    from tinylm.tokenizer.tiktoken_bridge import tiktoken_from_hf

    documents = list(open_corpus("pystdlib").documents())
    n_bytes = sum(len(d.encode("utf-8")) for d in documents)

    start = time.perf_counter()
    tokenizer = train_bpe(documents, args.vocab_size)
    train_s = time.perf_counter() - start

    hf = HFTokenizer.from_str(tokenizer.to_json())
    hf.encode_special_tokens = True  # corpus text is ordinary text
    encoding = tiktoken_from_hf(json.loads(tokenizer.to_json()), "bench")
    tokenizer.num_threads = args.threads

    hf_ids = [e.ids for e in hf.encode_batch(documents, add_special_tokens=False)]
    tiktoken_ids = encoding.encode_ordinary_batch(documents, num_threads=args.threads)
    tinylm_ids = [a.tolist() for a in tokenizer.encode_arrays(documents)]

    hf_rate = best_rate(lambda: hf.encode_batch(documents, add_special_tokens=False), n_bytes, args.repeats)
    tiktoken_rate = best_rate(lambda: encoding.encode_ordinary_batch(documents, num_threads=args.threads),
                              n_bytes, args.repeats)
    tinylm_rate = best_rate(lambda: tokenizer.encode_arrays(documents), n_bytes, args.repeats)

    with tempfile.TemporaryDirectory() as home:
        os.environ["TINYLM_HOME"] = home
        prepare_times = []
        for attempt in range(2):
            start = time.perf_counter()
            prepare_dataset(vocab_size=args.vocab_size, out=Path(home) / f"d{attempt}", progress=False)
            prepare_times.append(time.perf_counter() - start)

    result = {
        "corpus": "pystdlib",
        "python": sys.version.split()[0],
        "corpus_mb": round(n_bytes / 1e6, 2),
        "documents": len(documents),
        "cpu_threads": len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count(),
        "load_average_1m": round(os.getloadavg()[0], 2) if hasattr(os, "getloadavg") else None,
        "vocab_size": tokenizer.n_vocab,
        "bytes_per_token": round(n_bytes / sum(map(len, tiktoken_ids)), 3),
        "bpe_train_s": round(train_s, 2),
        "encode_hf_tokenizers_mb_s": round(hf_rate, 2),
        "encode_tiktoken_mb_s": round(tiktoken_rate, 2),
        "encode_tinylm_mb_s": round(tinylm_rate, 2),
        "tiktoken_over_hf": round(tiktoken_rate / hf_rate, 2),
        "tinylm_over_tiktoken": round(tinylm_rate / tiktoken_rate, 2),
        "ids_identical": hf_ids == tiktoken_ids == tinylm_ids,
        "threads": args.threads,
        "prepare_s": round(min(prepare_times), 2),
        "prepare_runs_s": [round(t, 2) for t in prepare_times],
    }
    print(json.dumps(result))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
