"""Sample text from a checkpoint, streamed to stdout as it is generated.

RUN is a run folder (its newest checkpoint) or one checkpoint folder. The prompt comes from
--prompt or --prompt-file; with neither (or an empty one) generation starts a fresh document from the
end-of-text token, and its first token is never end-of-text (a new document is at least one token
long; it ends at the next one). A prompt longer than the model's window keeps its last tokens, with a notice.

examples:
  tinylm generate --checkpoint runs/tiny-modern --prompt "def main(" --max-new-tokens 100
  tinylm generate --checkpoint runs/tiny-modern --temperature 0              greedy
  tinylm generate --checkpoint runs/small --draft runs/tiny-modern             speculative decoding
  tinylm generate --checkpoint runs/tiny-modern --int8 --num-samples 3 --seed 1
  tinylm generate --checkpoint runs/tiny-modern-sft --chat --prompt "What is 2 + 3?"   a chat model
  tinylm generate --checkpoint runs/calc-sft --chat --tools calculator --prompt "What is 347 * 582?"

With --chat --tools, the model's calls run (each call and result on stderr) and their results go
back to it until it answers; stdout gets the final answer (inference/tool_loop.py).
"""

from __future__ import annotations

import argparse
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from tinylm.cli import option_types
from tinylm.cli.options import add_option
from tinylm.errors import TinyLMError
from tinylm.inference.engine import Engine
from tinylm.inference.loading import chat_format_of, eot_id, load_for_generation
from tinylm.inference.sampling import SamplingParams
from tinylm.inference.speculative import DRAFT_TOKENS, SpeculativeDecoder, SpeculativeStats
from tinylm.inference.streaming import TextStream
from tinylm.inference.tool_loop import run_with_tools
from tinylm.options import CHECKPOINT, INT8, MAX_NEW_TOKENS, SEED, SYSTEM, TEMPERATURE, THREADS, TOOLS, TOP_K, TOP_P
from tinylm.tools import Tool, check_can_call, get_tools, tool_declarations

HELP = "sample text from a checkpoint (streams to stdout)"
MAX_NUM_SAMPLES = 10_000


def add_sampling_arguments(parser: argparse.ArgumentParser, max_new_tokens: int) -> None:
    """Options shared by `generate` and `chat`."""
    add_option(parser, "checkpoint", CHECKPOINT)
    add_option(parser, "max_new_tokens", MAX_NEW_TOKENS, max_new_tokens)
    add_option(parser, "temperature", TEMPERATURE, 0.8)
    add_option(parser, "top_k", TOP_K, kind="int")
    add_option(parser, "top_p", TOP_P, kind="float")
    parser.add_argument("--min-p", type=float, default=None, metavar="P",
                        help="drop tokens less likely than P times the most likely one")
    parser.add_argument("--repetition-penalty", type=float, default=1.0, metavar="R",
                        help="> 1 discourages tokens already in the text (default %(default)s)")
    add_option(parser, "int8", INT8, False)
    add_option(parser, "seed", SEED, 0)
    add_option(parser, "threads", THREADS, kind="int", note="1 is often fastest for small models on a busy machine")


def add_arguments(parser: argparse.ArgumentParser) -> None:
    add_sampling_arguments(parser, max_new_tokens=200)
    source = parser.add_mutually_exclusive_group()
    source.add_argument("--prompt", default=None, metavar="TEXT",
                        help="text to continue (none: a new document, never empty)")
    source.add_argument("--prompt-file", default=None, metavar="F", help="read the prompt from a UTF-8 file")
    parser.add_argument("--draft", default=None, metavar="RUN",
                        help="a small model with the same tokenizer for speculative decoding")
    parser.add_argument("--draft-tokens", type=option_types.bounded_int(1, 16), default=None, metavar="K",
                        help=f"with --draft: tokens the draft proposes per target pass (default {DRAFT_TOKENS})")
    parser.add_argument("--chat", action="store_true",
                        help="the prompt is a user message to a chat model (its chat template); the reply ends "
                             "at the end of its turn")
    add_option(parser, "system", SYSTEM, note="with --chat")
    add_option(parser, "tools", TOOLS, note="with --chat")
    parser.add_argument("--num-samples", type=option_types.bounded_int(1, MAX_NUM_SAMPLES), default=1, metavar="K",
                        help="independent samples (default 1)")


def sampling_params(args: argparse.Namespace) -> Any:
    """The validated sampling options (one line for a bad one), before any checkpoint is read."""
    return SamplingParams(temperature=args.temperature, top_k=args.top_k, top_p=args.top_p, min_p=args.min_p,
                          repetition_penalty=args.repetition_penalty)


def prompt_ids(text: str, tokenizer: Any, window: int, room: int = 1) -> list[int]:
    """Token ids of a prompt: EOT for an empty one; cut from the left (with a notice) to leave `room` in the window."""
    ids = list(tokenizer.encode(text)) if text else []
    if not ids:
        eot = eot_id(tokenizer)
        if eot is None:
            raise TinyLMError("the prompt is empty and the tokenizer has no end-of-text token to start from")
        return [eot]
    limit = max(1, window - room)
    if len(ids) > limit:
        print(f"tinylm: the prompt has {len(ids)} tokens, more than the model's window allows; "
              f"keeping the last {limit}", file=sys.stderr)
        ids = ids[-limit:]
    return ids


def chat_messages(text: str, system: str | None, tools: list[Tool]) -> list[dict[str, Any]]:
    """The prompt conversation of `generate --chat`: the system turn (with the tools declared), the user's."""
    head: list[dict[str, Any]] = []
    if system or tools:
        head = [{"role": "system", "content": system or "", **({"tools": tool_declarations(tools)} if tools else {})}]
    return [*head, {"role": "user", "content": text}]


def chat_prompt(text: str, system: str | None, tokenizer: Any, meta: dict[str, Any], window: int,
                tools: list[Tool] | None = None) -> tuple[list[int], list[int]]:
    """(ids, stop ids) for `generate --chat`: the message as a user turn in the checkpoint's chat format."""
    chat = chat_format_of(tokenizer, meta)
    if chat is None:
        raise TinyLMError(f"checkpoint {meta['path']} has no chat template: it is a base model (fine-tune it with "
                          "`tinylm sft`, or generate without --chat)")
    check_can_call(tools or [], chat, meta["path"])
    ids = chat.prompt_ids(chat_messages(text, system, tools or []))
    if len(ids) >= window:
        raise TinyLMError(f"the message is {len(ids)} tokens in the chat format: no room for a reply in the "
                          f"model's {window}-token window")
    return ids, list(chat.stop_ids)


def use_threads(threads: int | None) -> None:
    """--threads: torch's intra-op threads for this process (None keeps torch's choice)."""
    import torch

    if threads is not None:
        torch.set_num_threads(threads)


def check_same_tokenizer(tokenizer: Any, draft_tokenizer: Any, draft: str) -> None:
    """Speculative decoding feeds the target's ids to the draft: both must split text the same way."""
    if draft_tokenizer.fingerprint != tokenizer.fingerprint:
        raise TinyLMError(f"--draft {draft} has another tokenizer than the checkpoint: speculative decoding "
                          "needs both models to share one tokenizer")


def _read_prompt(args: argparse.Namespace) -> str:
    if args.prompt_file is None:
        return args.prompt or ""
    path = Path(args.prompt_file)
    if not path.is_file():
        raise TinyLMError(f"prompt file not found: {path}")
    try:
        return path.read_text(encoding="utf-8")
    except UnicodeDecodeError:
        raise TinyLMError(f"prompt file {path} is not UTF-8 text") from None


def _tokens(engine: Engine, speculator: SpeculativeDecoder | None, ids: list[int], limit: int,
            sampling: SamplingParams, seed: int, stops: list[int], stats: SpeculativeStats, fresh: bool
            ) -> Iterator[int]:
    """One sample's new tokens (at most `limit`). A new document (`fresh`: no prompt) cannot end before its first
    token: end-of-text follows end-of-text often enough in training that most seeds would print nothing."""
    first = min(int(fresh), limit)
    if speculator is None:
        yield from engine.stream(ids, limit, sampling, seed=seed, stop_ids=stops, min_new_tokens=first)
        return
    opening = (list(engine.stream(ids, first, sampling, seed=seed, stop_ids=stops, min_new_tokens=first))
               if first else [])  # a prompt: no opening token, and no prefill the speculator then repeats
    yield from opening  # speculative decoding goes on from the document's first token
    yield from speculator.stream(ids + opening, limit - len(opening), sampling=sampling, seed=seed, stop_ids=stops,
                                 stats=stats)


def _write(text: str) -> None:
    sys.stdout.write(text)
    sys.stdout.flush()


def _generate_with_tools(engine: Engine, chat: Any, text: str, args: argparse.Namespace, tools: list[Tool],
                         window: int) -> int:
    """`generate --chat --tools`: each sample through the tool loop, calls and results on stderr, answers on stdout."""
    sampling = sampling_params(args)
    for sample in range(args.num_samples):
        def generate(ids: list[list[int]], limits: list[int], _rows: list[int],
                     seed: int = args.seed + sample) -> list[list[int]]:
            return engine.generate(ids, limits, sampling, seed=seed, stop_ids=chat.stop_ids)

        (run_,) = run_with_tools(generate, chat, [chat_messages(text, args.system, tools)], tools,
                                 args.max_new_tokens, window)
        if args.num_samples > 1:
            _write(f"{'' if sample == 0 else chr(10)}--- sample {sample + 1} ---\n")
        for message in run_.messages:
            for call in message.get("tool_calls", []):
                print(f"tinylm: {call['function']['name']}({call['function']['arguments']})", file=sys.stderr)
            if message["role"] == "tool":
                print(f"tinylm: -> {message['content']}", file=sys.stderr)
        if run_.stopped != "answer":
            print(f"tinylm: stopped before an answer ({'turn limit' if run_.stopped == 'turns' else 'window full'})",
                  file=sys.stderr)
        _write(run_.final + "\n")
    return 0


def run(args: argparse.Namespace) -> int:
    import torch  # noqa: F401 - imported here so `tinylm --help` stays instant

    if args.draft_tokens is not None and args.draft is None:
        raise TinyLMError("--draft-tokens needs --draft: it is how many tokens the draft proposes per round")
    sampling = sampling_params(args)
    text = _read_prompt(args)
    use_threads(args.threads)
    model, tokenizer, meta = load_for_generation(args.checkpoint, int8=args.int8)
    draft = None
    if args.draft is not None:
        draft, draft_tokenizer, _ = load_for_generation(args.draft, int8=args.int8)
        check_same_tokenizer(tokenizer, draft_tokenizer, args.draft)
    print(f"tinylm: {meta['path']} (step {meta.get('step')}, {model.config.arch}, "
          f"{model.num_params() / 1e6:.1f}M parameters{', int8' if args.int8 else ''})", file=sys.stderr)
    if meta.get("decode_precision"):
        print(f"tinylm: {meta['decode_precision']}", file=sys.stderr)

    window = model.config.context_length
    tools = get_tools(args.tools)
    if tools and not args.chat:
        raise TinyLMError("--tools needs --chat: only a chat model's turns can call tools")
    if args.chat:
        ids, stops = chat_prompt(text, args.system, tokenizer, meta, window, tools)
        if tools:
            return _generate_with_tools(Engine(model), chat_format_of(tokenizer, meta), text, args, tools, window)
        text, fresh = "", False  # the reply is printed, not the rendered conversation
    else:
        ids, fresh = prompt_ids(text, tokenizer, window), not text
        stops = [] if eot_id(tokenizer) is None else [eot_id(tokenizer)]
    engine = Engine(model)
    started, total = time.perf_counter(), 0
    stats = SpeculativeStats()
    speculator = None if draft is None else SpeculativeDecoder(model, draft, args.draft_tokens or DRAFT_TOKENS)
    for sample in range(args.num_samples):
        if args.num_samples > 1:
            _write(f"{'' if sample == 0 else chr(10)}--- sample {sample + 1} ---\n")
        _write(text)
        stream = TextStream(tokenizer)
        seed = args.seed + sample
        for token in _tokens(engine, speculator, ids, args.max_new_tokens, sampling, seed, stops, stats, fresh):
            _write(stream.push(token))
            total += 1
        _write(stream.flush() + "\n")
    seconds = time.perf_counter() - started
    note = f"tinylm: {total} tokens in {seconds:.2f}s ({total / max(seconds, 1e-9):.0f} tokens/s)"
    if draft is not None:
        note += f", draft acceptance {stats.acceptance_rate:.0%}"
    print(note, file=sys.stderr)
    return 0
