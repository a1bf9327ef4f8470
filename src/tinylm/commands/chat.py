"""Talk to a checkpoint: each line you type is added to the conversation and the model's reply streams back.

The conversation is one growing text that the model continues; when it no longer fits the model's
window, the oldest tokens are dropped (room is always left for a whole reply). A reply ends at the
end-of-text token or after --max-new-tokens. Type /reset to start over; Ctrl-D or Ctrl-C quits.

examples:
  tinylm chat --checkpoint runs/tiny-modern
  tinylm chat --checkpoint runs/tiny-modern --temperature 0.7 --top-p 0.9 --int8
"""

from __future__ import annotations

import argparse
import sys

from tinylm.commands.generate import add_sampling_arguments, sampling_params, use_threads

HELP = "interactive loop: type a line, the model's reply streams back"


def add_arguments(parser: argparse.ArgumentParser) -> None:
    add_sampling_arguments(parser, max_new_tokens=128)


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
    from tinylm.inference.loading import eot_id, load_for_generation
    from tinylm.inference.streaming import TextStream

    sampling = sampling_params(args)
    use_threads(args.threads)
    model, tokenizer, meta = load_for_generation(args.checkpoint, int8=args.int8)
    window = model.config.context_length
    reply_room = reply_limit(args.max_new_tokens, window)
    eot = eot_id(tokenizer)
    stops = [] if eot is None else [eot]
    engine = Engine(model)
    interactive = sys.stdin.isatty()
    print(f"tinylm: chatting with {meta['path']} (window {window} tokens); Ctrl-D to quit", file=sys.stderr)

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
