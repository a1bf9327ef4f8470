"""Talk to a checkpoint: each line you type is a turn, and the model's reply streams back.

A fine-tuned checkpoint (one that carries a chat template, e.g. from `tinylm sft`) is spoken to in
its chat format: each line is a user turn, the reply ends at the end-of-turn token, --system sets a
system prompt, and when the conversation outgrows the window the oldest exchanges are dropped first
(with a notice). A base model has no turns: the conversation is one growing text that it continues,
and a reply ends at the end-of-text token or after --max-new-tokens. When standard input is not a
terminal, each line read is one turn and each reply is printed on its own line, so chats can be
scripted. Type /reset to start over; Ctrl-D or Ctrl-C quits.

examples:
  tinylm chat --checkpoint runs/tiny-modern-sft
  printf 'What is 2 + 3?\nAnd 4 + 4?\n' | tinylm chat --checkpoint runs/tiny-modern-sft --temperature 0
  tinylm chat --checkpoint runs/tiny-modern-sft --system "Answer with a number."
  tinylm chat --checkpoint runs/tiny-modern --temperature 0.7 --top-p 0.9 --int8    a base model
"""

from __future__ import annotations

import argparse
import sys
from typing import Any

from tinylm.commands.generate import add_sampling_arguments, sampling_params, use_threads

HELP = "interactive loop: type a line, the model's reply streams back"


def add_arguments(parser: argparse.ArgumentParser) -> None:
    add_sampling_arguments(parser, max_new_tokens=128)
    parser.add_argument("--system", default=None, metavar="TEXT", help="system prompt (chat models)")


def reply_limit(max_new_tokens: int, window: int) -> int:
    """Tokens a reply may take: at most half the window, so the history keeps the rest (said when it caps)."""
    room = max(1, window // 2)
    if max_new_tokens > room:
        print(f"tinylm: --max-new-tokens {max_new_tokens} is capped at {room}: a reply may use at most half of "
              f"the model's {window}-token window, the conversation needs the rest", file=sys.stderr)
        return room
    return max_new_tokens


def run(args: argparse.Namespace) -> int:
    from tinylm.inference.engine import Engine
    from tinylm.inference.loading import chat_format_of, eot_id, load_for_generation
    from tinylm.inference.streaming import TextStream

    sampling = sampling_params(args)
    use_threads(args.threads)
    model, tokenizer, meta = load_for_generation(args.checkpoint, int8=args.int8)
    window = model.config.context_length
    reply_room = reply_limit(args.max_new_tokens, window)
    engine = Engine(model)
    interactive = sys.stdin.isatty()
    chat = chat_format_of(tokenizer, meta)
    kind = "its chat format" if chat is not None else "a base model: it continues the text"
    print(f"tinylm: chatting with {meta['path']} ({kind}; window {window} tokens); Ctrl-D to quit", file=sys.stderr)
    if meta.get("decode_precision"):
        print(f"tinylm: {meta['decode_precision']}", file=sys.stderr)
    if chat is not None:
        return _chat_in_turns(args, engine, chat, window, reply_room, sampling, interactive)
    if args.system:
        print("tinylm: --system is ignored: a base model has no system turn", file=sys.stderr)
    eot = eot_id(tokenizer)
    stops = [] if eot is None else [eot]

    history: list[int] = []
    turn = 0
    try:
        while True:
            if interactive:
                print("> ", end="", file=sys.stderr, flush=True)
            line = sys.stdin.readline()
            if not line:  # EOF (Ctrl-D or the end of piped input)
                break
            text = line.rstrip("\r\n")
            if text.strip() == "/reset":
                history = []
                print("tinylm: history cleared", file=sys.stderr)
                continue
            history += tokenizer.encode(text + "\n")
            history = history[-max(1, window - reply_room) :]  # keep the newest turns within the window
            context = history or ([eot] if eot is not None else [])
            if not context:
                continue
            stream = TextStream(tokenizer)
            reply: list[int] = []
            for token in engine.stream(context, reply_room, sampling, seed=args.seed + turn, stop_ids=stops):
                reply.append(token)
                sys.stdout.write(stream.push(token))
                sys.stdout.flush()
            sys.stdout.write(stream.flush() + "\n")
            sys.stdout.flush()
            history += reply
            turn += 1
    except KeyboardInterrupt:
        print("", file=sys.stderr)
    return 0


def _chat_in_turns(args: argparse.Namespace, engine: Any, chat: Any, window: int, reply_room: int, sampling: Any,
                   interactive: bool) -> int:
    """The loop for a chat model: user turns in, assistant turns out, the session kept within the window."""
    from tinylm.errors import TinyLMError
    from tinylm.inference.chat_session import ChatSession
    from tinylm.inference.streaming import TextStream

    session = ChatSession(chat, window, reply_room, system=args.system)
    turn = 0
    try:
        while True:
            if interactive:
                print("> ", end="", file=sys.stderr, flush=True)
            line = sys.stdin.readline()
            if not line:  # EOF (Ctrl-D or the end of piped input)
                break
            text = line.rstrip("\r\n")
            if text.strip() == "/reset":
                session.reset()
                print("tinylm: history cleared", file=sys.stderr)
                continue
            try:
                ids, dropped = session.prompt(text)
            except TinyLMError as exc:
                print(f"tinylm: {exc}", file=sys.stderr)
                continue
            if dropped:
                print(f"tinylm: dropped the {dropped} oldest exchange(s) to stay within the {window}-token window",
                      file=sys.stderr)
            stream = TextStream(chat.tokenizer)
            reply: list[int] = []
            for token in engine.stream(ids, reply_room, sampling, seed=args.seed + turn, stop_ids=chat.stop_ids):
                reply.append(token)
                sys.stdout.write(stream.push(token))
                sys.stdout.flush()
            sys.stdout.write(stream.flush() + "\n")
            sys.stdout.flush()
            session.add_reply(chat.tokenizer.decode(reply))
            turn += 1
    except KeyboardInterrupt:
        print("", file=sys.stderr)
    return 0
