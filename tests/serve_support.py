"""Shared by the serving tests: a micro checkpoint and a real uvicorn server on a free loopback port."""

from __future__ import annotations

import socket
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import torch
import uvicorn

from tinylm.checkpoint import load_model, save_checkpoint
from tinylm.config import ModelConfig
from tinylm.models.factory import build_model
from tinylm.serve.app import create_app
from tinylm.serve.served_model import ServedModel
from tinylm.tokenizer import train_bpe

CORPUS = ["def add(a, b):\n    return a + b\n", "class Point:\n    x: int = 0\n", "print('héllo wörld')\n",
          "emoji 🙂🚀 and 漢字かな text\n"] * 30


def make_checkpoint(root: Path, arch: str = "modern", context_length: int = 64, seed: int = 0, **fields) -> Path:
    """A random micro model with confident predictions (large init) and a BPE that knows the chat tokens;
    `fields` are further model fields (a RoPE scaling rule)."""
    tokenizer_file = train_bpe(CORPUS, vocab_size=320).save(root / "tokenizer.json")
    extra = dict(n_kv_head=2) if arch == "modern" else dict(tie_embeddings=False)
    config = ModelConfig(arch=arch, vocab_size=320, context_length=context_length, n_embed=32, n_head=4,
                         n_blocks=2, init_std=0.3, **extra, **fields)
    torch.manual_seed(seed)
    run_dir = root / f"micro-{arch}"
    save_checkpoint(run_dir, 1, build_model(config), config, tokenizer_file=tokenizer_file)
    return run_dir


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@contextmanager
def serving(run_dir: Path, api_key: str | None = None, max_slots: int = 16, prefill_budget: int = 64,
            wrap=None) -> Iterator[tuple[str, ServedModel, uvicorn.Server]]:
    """(base URL, served model, uvicorn server) of a server in a thread; `wrap(scheduler)` may slow its steps."""
    model, tokenizer, meta = load_model(run_dir)
    served = ServedModel.build("micro", model, tokenizer, max_slots=max_slots, prefill_budget=prefill_budget,
                               meta=meta)
    if wrap is not None:
        wrap(served.scheduler)
    port = free_port()
    config = uvicorn.Config(create_app(served, api_key), host="127.0.0.1", port=port, log_level="warning",
                            lifespan="on")
    with uvicorn_in_thread(config) as server:
        yield f"http://127.0.0.1:{port}", served, server


@contextmanager
def uvicorn_in_thread(config: uvicorn.Config) -> Iterator[uvicorn.Server]:
    """A uvicorn server running `config` in a daemon thread, started before this yields, stopped after."""
    server = uvicorn.Server(config)
    thread = threading.Thread(target=server.run, daemon=True)
    thread.start()
    deadline = time.monotonic() + 30
    while not server.started:
        if time.monotonic() > deadline or not thread.is_alive():
            raise RuntimeError("the test server did not start")
        time.sleep(0.02)
    try:
        yield server
    finally:
        server.should_exit = True
        thread.join(30)


PARROT_TEXT = "emoji 🙂🚀 and 漢字かな text, ünïcödé\n"
GREETING = [{"role": "user", "content": "Hello!"},
            {"role": "assistant", "content": "Hi! I am a tiny model served by tinylm 🙂. Ask me anything."}]


def make_parrot_checkpoint(root: Path, steps: int = 80) -> Path:
    """A micro model trained until it recites PARROT_TEXT: its greedy output is known multi-byte text."""
    return _train_to_recite(root, "parrot", lambda tokenizer: tokenizer.encode(PARROT_TEXT * 8), steps)


def make_greeter_checkpoint(root: Path, steps: int = 200) -> Path:
    """A micro chat model that answers "Hello!" with GREETING's reply (for the browser test and its screenshot).
    200 steps: after 80, an AVX2-only CPU's model still said "Hi! Imm a ty..." (an AVX-512 one's recited it)."""
    from tinylm.tokenizer.chat_format import ChatFormat

    return _train_to_recite(root, "greeter", lambda tokenizer: ChatFormat.from_tokenizer(tokenizer).render(
        GREETING).ids * 8, steps, context_length=160)  # room for a few turns of conversation


def _train_to_recite(root: Path, name: str, make_ids, steps: int, context_length: int = 64) -> Path:
    tokenizer = train_bpe(CORPUS, vocab_size=320)
    tokenizer_file = tokenizer.save(root / f"{name}-tokenizer.json")
    config = ModelConfig(arch="modern", vocab_size=320, context_length=context_length, n_embed=48, n_head=4,
                         n_kv_head=2, n_blocks=2)
    torch.manual_seed(0)
    model = build_model(config)
    ids = torch.tensor(make_ids(tokenizer))
    rows = torch.stack([ids[i : i + 65] for i in range(0, len(ids) - 65, 19)])
    optimizer = torch.optim.AdamW(model.parameters(), lr=1e-2)
    for _ in range(steps):
        _, loss = model(rows[:, :-1], rows[:, 1:])
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
    run_dir = root / name
    save_checkpoint(run_dir, steps, model, config, tokenizer_file=tokenizer_file)
    return run_dir
