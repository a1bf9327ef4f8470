"""Serve a checkpoint behind OpenAI's API, with a web chat page at /.

Many clients share one continuously batched engine: requests join the running batch at the next
step and leave it as soon as they finish or their client goes away. The checkpoint is loaded, and
the port bound, before anything is served, so a bad path or a busy port is one line and exit 1.
Ctrl-C or SIGTERM stops taking new requests, lets the running ones finish, then exits.

examples:
  tinylm serve --checkpoint runs/tiny-modern
  tinylm serve --checkpoint runs/tiny-modern --port 8080 --api-key "$KEY"
  tinylm serve --checkpoint runs/tiny-chat --dtype fp32 --port 8001   # what `tinylm rl --rollout-url` samples
  tinylm serve --checkpoint runs/calc-sft --tools calculator   # runs calls for requests with builtin_tools
  curl http://127.0.0.1:8000/v1/completions -H 'Content-Type: application/json' \\
       -d '{"model": "tiny-modern", "prompt": "def main(", "max_tokens": 40}'
"""

from __future__ import annotations

import argparse
import signal
import socket
import sys
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import torch

from tinylm.cli import option_types
from tinylm.cli.commands.generate import use_threads
from tinylm.cli.options import add_option
from tinylm.errors import TinyLMError
from tinylm.inference.loading import load_for_generation
from tinylm.options import CHECKPOINT, DTYPE, HOST, INT8, PORT, THREADS, TOOLS
from tinylm.serve.app import create_app
from tinylm.serve.engine_process import STREAM_INTERVAL_S, EngineClient, EngineOptions
from tinylm.serve.scheduler import LOGPROBS_MODES
from tinylm.serve.served_model import ServedModel
from tinylm.tokenizer.chat_format import ChatFormat
from tinylm.tools import check_can_call, get_tools

HELP = "OpenAI-compatible HTTP API with continuous batching, and a web chat page"


def add_arguments(parser: argparse.ArgumentParser) -> None:
    add_option(parser, "checkpoint", CHECKPOINT)
    add_option(parser, "host", HOST, "127.0.0.1")
    add_option(parser, "port", PORT, 8000)
    parser.add_argument("--api-key", default=None, metavar="KEY",
                        help="require 'Authorization: Bearer KEY' on /v1 requests")
    parser.add_argument("--model-name", default=None, metavar="NAME",
                        help="the model id clients ask for (default: the checkpoint folder's name)")
    parser.add_argument("--max-slots", type=option_types.bounded_int(1, 1024), default=16, metavar="N",
                        help="requests decoded together in one batch; more wait in line (default %(default)s)")
    parser.add_argument("--prefill-chunk", type=option_types.bounded_int(1, 1 << 20), default=64, metavar="T",
                        help="prompt tokens computed per step between decode steps (default %(default)s)")
    parser.add_argument("--drain-timeout", type=option_types.bounded_float(0), default=60.0, metavar="S",
                        help="on shutdown, seconds to let running requests finish (default %(default)s)")
    parser.add_argument("--admin-token", default=None, metavar="TOKEN",
                        help="let callers from other machines use POST /admin/reload with 'Authorization: Bearer "
                             "TOKEN' (without it, only this machine may reload weights)")
    add_option(parser, "dtype", DTYPE, "auto", note="of decoding; fp32 to match the float32 log-probs of an RL "
               "trainer sampling here")
    parser.add_argument("--logprobs-mode", choices=LOGPROBS_MODES, default="raw",
                        help="log-probs of the model's distribution (raw), or of the one each token was drawn from, "
                             "after temperature, top-k/top-p/min-p (processed) (default %(default)s)")
    parser.add_argument("--engine", choices=("process", "thread"), default="process",
                        help="where the model runs: a process of its own, so decoding never waits for HTTP's "
                             "Python, or a thread of the server's process (default %(default)s)")
    parser.add_argument("--stream-interval-ms", type=option_types.bounded_float(0, 1000),
                        default=STREAM_INTERVAL_S * 1000, metavar="MS",
                        help="a streamed reply's tokens leave together every MS milliseconds, its first token and "
                             "its end at once: fewer wake-ups of the server and the client (default %(default)g; "
                             "0 sends every step; the engine process only)")
    add_option(parser, "int8", INT8, False)
    add_option(parser, "threads", THREADS, kind="int")
    add_option(parser, "tools", TOOLS, note="the server runs them for requests that name them in builtin_tools")


DECODE_DTYPES = {"auto": None, "fp32": torch.float32, "bf16": torch.bfloat16, "fp16": torch.float16}


def bind(host: str, port: int) -> socket.socket:
    """The listening socket, bound before the server starts: a busy port is one clear line."""
    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    # IPPROTO_TCP explicitly: asyncio turns Nagle off (TCP_NODELAY) only on sockets that say they are TCP,
    # and with Nagle on, each small streamed chunk can wait 40 ms for the client's delayed ACK
    sock = socket.socket(family, socket.SOCK_STREAM, socket.IPPROTO_TCP)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    try:
        sock.bind((host, port))
        sock.listen(2048)  # from here on, connections wait in the backlog until the server accepts them
    except OSError as exc:
        sock.close()
        raise TinyLMError(f"cannot listen on {host}:{port}: {exc.strerror or exc}") from None
    return sock


def run(args: argparse.Namespace) -> int:
    import uvicorn

    use_threads(args.threads)
    tools = get_tools(args.tools)
    dtype = DECODE_DTYPES[args.dtype]
    engine = None
    if args.engine == "process":
        # here only the checks (a bad checkpoint is one line before binding), on the CPU; the engine process
        # loads the model where it runs and chooses its precision
        model, tokenizer, meta = load_for_generation(args.checkpoint, int8=args.int8, device="cpu",
                                                     dtype=torch.float32)
        _check_tools(tools, tokenizer, meta)
        options = EngineOptions(str(meta["path"]), args.int8, dtype, args.max_slots, args.prefill_chunk,
                                args.logprobs_mode, args.threads, args.stream_interval_ms / 1000)
        engine, model = EngineClient(options, model.config), None
        sock = bind(args.host, args.port)  # a busy port is refused before the engine loads anything
        engine.start()
        meta["decode_precision"] = engine.precision
    else:
        model, tokenizer, meta = load_for_generation(args.checkpoint, int8=args.int8, dtype=dtype)
        _check_tools(tools, tokenizer, meta)
        sock = bind(args.host, args.port)
    name = args.model_name or Path(args.checkpoint).resolve().name
    served = ServedModel.build(name, model or engine.model, tokenizer, max_slots=args.max_slots,
                               prefill_budget=args.prefill_chunk, meta=meta, logprobs_mode=args.logprobs_mode,
                               int8=args.int8, engine=engine, tools=tools)
    host, port = sock.getsockname()[:2]
    config = uvicorn.Config(create_app(served, args.api_key, args.admin_token), log_level="warning",
                            timeout_graceful_shutdown=args.drain_timeout)
    print(f"tinylm: serving {name} ({meta['path']}) at http://{host}:{port}/v1, chat page at http://{host}:{port}/; "
          f"{meta['decode_precision']}, {args.logprobs_mode} log-probs, the model in a {args.engine} of its own"
          + (f", built-in tools {', '.join(t.name for t in tools)}" if tools else ""),
          file=sys.stderr, flush=True)
    with _quiet_after_shutdown():
        uvicorn.Server(config).run(sockets=[sock])
    print("tinylm: server stopped", file=sys.stderr)
    return 0


def _check_tools(tools: list, tokenizer: object, meta: dict) -> None:
    """--tools on a model that cannot call them is refused before the port is bound."""
    if tools:
        check_can_call(tools, ChatFormat.from_tokenizer(tokenizer), meta["path"])


@contextmanager
def _quiet_after_shutdown() -> Iterator[None]:
    """uvicorn drains on SIGTERM / Ctrl-C, then re-raises the signal to whoever handled it before: let that
    be a no-op, so a drained server exits 0 instead of being killed by its own signal."""
    previous = {sig: signal.signal(sig, lambda *_: None) for sig in (signal.SIGINT, signal.SIGTERM)}
    try:
        yield
    finally:
        for sig, handler in previous.items():
            signal.signal(sig, handler)
