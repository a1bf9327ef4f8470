"""BPE encoding speed: tinylm's tokenizer against `tiktoken` running the very same merges.

A byte-level BPE is trained on a slice of the Python standard library's source (the embedded
corpus, read from the running interpreter), then the same text is encoded by tinylm's `Tokenizer`
and by a `tiktoken.Encoding` built directly from that tokenizer's merges, and, for scale, by
Hugging Face `tokenizers`. All three must produce the same ids (`tokenizer_ids_match`); the rates
are megabytes of UTF-8 text per second, on the same thread count.
"""

from __future__ import annotations

import json
import sysconfig
from pathlib import Path
from typing import Any

import torch

from tinylm.bench.timing import interleaved, ratio
from tinylm.tokenizer.tiktoken_bridge import tiktoken_from_hf
from tinylm.tokenizer.train import train_bpe

SKIPPED_FOLDERS = {"test", "tests", "idle_test", "site-packages"}


def stdlib_text(max_bytes: int) -> list[str]:
    """Whole .py files of the standard library (tests excluded), in a fixed order, up to `max_bytes`."""
    root = Path(sysconfig.get_paths()["stdlib"])
    docs, total = [], 0
    for path in sorted(root.rglob("*.py")):
        if SKIPPED_FOLDERS.intersection(path.relative_to(root).parts):
            continue
        try:
            text = path.read_text(encoding="utf-8")
        except (UnicodeDecodeError, OSError):
            continue
        docs.append(text)
        total += len(text.encode("utf-8"))
        if total >= max_bytes:
            break
    return docs


def tokenizer_speed(repeats: int, vocab_size: int = 4096, train_bytes: int = 2 << 20,
                    encode_bytes: int = 4 << 20) -> dict[str, Any]:
    from tokenizers import Tokenizer as HFTokenizer


    tokenizer = train_bpe(stdlib_text(train_bytes), vocab_size)
    docs = stdlib_text(encode_bytes)
    megabytes = sum(len(d.encode("utf-8")) for d in docs) / 1e6
    reference = tiktoken_from_hf(json.loads(tokenizer.to_json()), "same-merges")
    hf = HFTokenizer.from_str(tokenizer.to_json())
    threads = tokenizer.num_threads
    candidates = {
        "tinylm": (lambda: tokenizer.encode_ordinary_batch(docs), megabytes),
        "tiktoken": (lambda: reference.encode_ordinary_batch(docs, num_threads=threads), megabytes),
        "tokenizers": (lambda: hf.encode_batch(docs, add_special_tokens=False), megabytes),
    }
    measured = interleaved(candidates, torch.device("cpu"), repeats, warmup=1)
    ids = tokenizer.encode_ordinary_batch(docs[:50])
    match = ids == reference.encode_ordinary_batch(docs[:50]) and ids == [e.ids for e in hf.encode_batch(
        docs[:50], add_special_tokens=False)]
    return {
        "tokenizer_backend": tokenizer.backend, "tokenizer_text_mb": megabytes, "tokenizer_threads": threads,
        "tokenizer_encode_mb_per_s": measured["tinylm"].median, "tokenizer_encode": measured["tinylm"].to_dict(),
        "reference_tokenizer_encode_mb_per_s": measured["tiktoken"].median,
        "reference_tokenizer_encode": measured["tiktoken"].to_dict(),
        "hf_tokenizers_encode_mb_per_s": measured["tokenizers"].median,
        "tokenizer_ratio_vs_tiktoken": ratio(measured["tinylm"], measured["tiktoken"]),
        "tokenizer_ratio_vs_hf_tokenizers": ratio(measured["tinylm"], measured["tokenizers"]),
        "tokenizer_ids_match": match,
    }
