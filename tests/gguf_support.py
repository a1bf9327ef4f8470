"""Shared by the GGUF tests: checkpoints with every weight random, tinylm's greedy tokens, and a real llama.cpp.

llama.cpp is node-llama-cpp's prebuilt CPU binary, installed by `make setup` into .venv/llama-cpp
(tests/llama_cpp/package.json pins it); tests that need it skip, saying why, where npm is missing.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
from pathlib import Path
from typing import Any

import pytest
import torch

from tinylm.checkpoint import save_checkpoint
from tinylm.checkpoint.load import load_model
from tinylm.config import ModelConfig
from tinylm.inference.engine import Engine
from tinylm.inference.sampling import SamplingParams
from tinylm.models.factory import build_model
from tinylm.tokenizer import train_bpe

REPO = Path(__file__).resolve().parents[1]
PROBE = REPO / "tests" / "llama_cpp" / "probe.mjs"
LLAMA_CPP_DIR = Path(os.environ.get("TINYLM_LLAMA_CPP_DIR", REPO / ".venv" / "llama-cpp"))
CORPUS = [
    "def add(a, b):\n    return a + b\n" * 10,
    "the quick brown fox jumps over the lazy dog, isn't it? it's 1234 and 56 789. " * 10,
    "東京 and Москва and 🙂 are words too. " * 5,
]
VOCAB = 320


def bpe_tokenizer(root: Path, split_digits: bool = False) -> Path:
    """A small byte-level BPE trained here (it reserves the chat tokens), saved as tokenizer.json."""
    return train_bpe(CORPUS, vocab_size=300, split_digits=split_digits).save(root / "tokenizer.json")


R50K_PROBES = ["hello world!! 123 hello", "say hello, world 12312", "<|user|>hello<|end|><|endoftext|>"]


def fake_r50k(root: Path) -> tuple[Any, dict[bytes, int]]:
    """(tokenizer, ranks): a small rank table in r50k's tiktoken format, with end-of-text and the chat tokens.

    The real r50k_base file is never downloaded; this stands in for it (every token a merge of lower ranks).
    """
    import base64

    from tinylm.tokenizer.chat_tokens import CHAT_TOKENS
    from tinylm.tokenizer.r50k import load_r50k

    merged = [b"he", b"ll", b"hell", b"hello", b" w", b"or", b" wor", b"ld", b" world", b"12", b"123", b"!!"]
    tokens = [bytes([b]) for b in range(256)] + merged
    table = root / "fake.tiktoken"
    table.write_bytes(b"".join(base64.b64encode(t) + b" %d\n" % r for r, t in enumerate(tokens)))
    eot = len(tokens)
    tokenizer = load_r50k(table, verify=False, added={t: eot + 1 + i for i, t in enumerate(CHAT_TOKENS)})
    return tokenizer, {t: r for r, t in enumerate(tokens)}


def random_checkpoint(root: Path, name: str, config: ModelConfig, tokenizer_file: Path,
                      meta: dict[str, Any] | None = None, seed: int = 0, scale: float = 0.1,
                      head_bias: bool = False) -> Path:
    """A checkpoint whose every parameter is random, norms and biases too (the head bias only with `head_bias`)."""
    torch.manual_seed(seed)
    model = build_model(config).eval()
    with torch.no_grad():
        for param_name, p in model.named_parameters():
            if head_bias or not param_name.endswith("lm_head.bias"):
                p.add_(torch.randn_like(p) * scale)
    return save_checkpoint(root / name, 1, model, config, tokenizer_file=tokenizer_file, meta=meta)


def tinylm_greedy(checkpoint: Path, prompt: list[int], n: int, stop_ids: tuple[int, ...] = ()) -> list[int]:
    """tinylm's own greedy tokens in float32 (its KV-cached engine, as `tinylm generate` decodes)."""
    model, _, _ = load_model(checkpoint)
    engine = Engine(model.float().eval())
    return engine.generate([prompt], n, SamplingParams(temperature=0.0), stop_ids=stop_ids)[0]


def tinylm_logprobs(checkpoint: Path, ids: list[int]) -> torch.Tensor:
    """log-softmax of tinylm's float32 logits at every position of `ids` [T, vocab]."""
    model, _, _ = load_model(checkpoint)
    with torch.no_grad():
        logits = model.float().eval()(torch.tensor([ids]))[0][0]
    return torch.log_softmax(logits.double(), dim=-1)


def llama_cpp_missing() -> str | None:
    """Why llama.cpp cannot run here, or None."""
    if shutil.which("node") is None:
        return "node is not installed"
    if not (LLAMA_CPP_DIR / "node_modules" / "node-llama-cpp").is_dir():
        return f"node-llama-cpp is not installed in {LLAMA_CPP_DIR} (`make setup` installs it where npm exists)"
    return None


def needs_llama_cpp() -> pytest.MarkDecorator:
    reason = llama_cpp_missing()
    return pytest.mark.skipif(reason is not None, reason=reason or "")


def llama_cpp(model: Path, tasks: list[dict[str, Any]], context: int = 256, eog_probe: list[int] | None = None,
              **options: Any) -> dict[str, Any]:
    """The probe's answer: llama.cpp loads `model` and does each task (tests/llama_cpp/probe.mjs).

    `options`: threads, kv_type ("F32" unless given), flash_attention (false unless given).
    """
    request = {"model": str(model), "tasks": tasks, "context": context, "eog_probe": eog_probe or [], **options}
    done = subprocess.run(["node", str(PROBE), str(LLAMA_CPP_DIR)], input=json.dumps(request), capture_output=True,
                          text=True, timeout=300)
    assert done.returncode == 0, f"llama.cpp probe failed:\n{done.stderr[-3000:]}"
    return json.loads(done.stdout.splitlines()[-1])
