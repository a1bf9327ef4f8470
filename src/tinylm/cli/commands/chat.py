"""Talk to a checkpoint: each line you type is a turn, and the model's reply streams back.

A fine-tuned checkpoint (one that carries a chat template, e.g. from `tinylm sft`) is spoken to in
its chat format: each line is a user turn, the reply ends at the end-of-turn token, --system sets a
system prompt, and when the conversation outgrows the window the oldest exchanges are dropped first
(with a notice). A base model has no turns: the conversation is one growing text that it continues,
and a reply ends at the end-of-text token or after --max-new-tokens (or sooner, when the window has
less room left: the reply gets what is left). When standard input is not a terminal, each line read
is one turn and gets exactly one line on stdout, so chats can be scripted: a line break inside a
reply is written as \\n (and a backslash as \\\\), and a turn that cannot be answered prints an
empty line (the reason is on stderr). Type /reset to start over; Ctrl-D or Ctrl-C quits.

With --tools calculator,python the system turn declares those tools; when a reply calls one, the
call and its result are shown on stderr, the result goes back to the model as a tool turn, and it
replies again (at most 4 replies per line), as `tinylm eval` and the server run the same loop.
Only the final answer is printed on stdout, never the call markup.

examples:
  tinylm chat --checkpoint runs/tiny-modern-sft
  printf 'What is 2 + 3?\\nAnd 4 + 4?\\n' | tinylm chat --checkpoint runs/tiny-modern-sft --temperature 0
  tinylm chat --checkpoint runs/tiny-modern-sft --system "Answer with a number."
  tinylm chat --checkpoint runs/tiny-modern --temperature 0.7 --top-p 0.9 --int8    a base model
  echo 'What is 347 * 582?' | tinylm chat --checkpoint runs/calc-sft --tools calculator --temperature 0
"""

from __future__ import annotations

import argparse
import sys
from typing import Any

from tinylm.cli.commands.generate import add_sampling_arguments, sampling_params, use_threads
from tinylm.cli.options import add_option
from tinylm.errors import TinyLMError
from tinylm.inference.chat_session import ChatSession
from tinylm.inference.engine import Engine
from tinylm.inference.loading import chat_format_of, load_for_generation
from tinylm.inference.streaming import TextStream
from tinylm.inference.tool_loop import MAX_TURNS
from tinylm.options import SYSTEM, TOOLS
from tinylm.tokenizer.reply_parser import parse_reply
from tinylm.tools import check_can_call, get_tools, run_call, tool_declarations

HELP = "interactive loop: type a line, the model's reply streams back"


def add_arguments(parser: argparse.ArgumentParser) -> None:
    add_sampling_arguments(parser, max_new_tokens=128)
    add_option(parser, "system", SYSTEM)
    add_option(parser, "tools", TOOLS)


def reply_limit(max_new_tokens: int, window: int) -> int:
    """Tokens a reply may take: at most half the window, so the history keeps the rest (said when it caps)."""
    room = max(1, window // 2)
    if max_new_tokens > room:
        print(f"tinylm: --max-new-tokens {max_new_tokens} is capped at {room}: a reply may use at most half of "
              f"the model's {window}-token window, the conversation needs the rest", file=sys.stderr)
        return room
    return max_new_tokens


class TextHistory:
    """A base model's conversation: one growing text it continues, its oldest tokens dropped to fit."""

    def __init__(self, tokenizer: Any, window: int, reply_room: int) -> None:
        self.tokenizer, self.budget, self.reply_room = tokenizer, max(1, window - reply_room), reply_room
        eot = getattr(tokenizer, "eot_id", None)
        self.start = [] if eot is None else [int(eot)]
        self.stop_ids = self.start
        self.ids: list[int] = []

    def prompt(self, text: str) -> tuple[list[int], int]:
        self.ids = (self.ids + self.tokenizer.encode(text + "\n"))[-self.budget:]  # keep the newest text
        return self.ids or self.start, 0

    def room(self, ids: list[int]) -> int:
        return self.reply_room

    def add_reply(self, reply: list[int]) -> None:
        self.ids += reply
        return None

    def reset(self) -> None:
        self.ids = []


class Turns:
    """A chat model's conversation in its chat format (`ChatSession`), with the same interface as TextHistory."""

    def __init__(self, chat: Any, window: int, reply_room: int, system: str | None, tools: list[Any]) -> None:
        self.session = ChatSession(chat, window, reply_room, system=system, tools=tool_declarations(tools))
        self.tools = tools
        self.stop_ids = list(chat.stop_ids)
        self.prompt, self.reset, self.room = self.session.prompt, self.session.reset, self.session.room
        self.answer = ""  # the content of the last reply that called no tool

    def add_reply(self, reply: list[int]) -> list[int] | None:
        """Keep the reply; when it calls tools, run them, keep their results and give the next prompt's ids."""
        parsed = parse_reply(self.session.chat, reply)
        self.session.add_reply(parsed.message())
        if not parsed.calls or not self.tools:
            self.answer = parsed.content
            return None
        for call in parsed.calls:
            result = (f"error: malformed call: {call.error}" if call.error
                      else run_call(call.name, call.arguments, self.tools).content)
            print(f"tinylm: {call.name}({call.arguments}) -> {result}", file=sys.stderr)
            self.session.add_tool_result(result)
        return self.session.follow_up()[0]


class Shown:
    """A reply on stdout: streamed as it comes; when scripted, kept to one line per turn (line breaks as \\n)."""

    def __init__(self, scripted: bool) -> None:
        self.scripted = scripted

    def write(self, text: str) -> None:
        if self.scripted:
            text = text.replace("\\", "\\\\").replace("\n", "\\n")
        sys.stdout.write(text)
        sys.stdout.flush()

    def end(self) -> None:
        """Close the turn's line (an empty line when it got no answer, so a script's lines stay aligned)."""
        sys.stdout.write("\n")
        sys.stdout.flush()


def run(args: argparse.Namespace) -> int:

    sampling = sampling_params(args)
    use_threads(args.threads)
    model, tokenizer, meta = load_for_generation(args.checkpoint, int8=args.int8)
    window = model.config.context_length
    reply_room = reply_limit(args.max_new_tokens, window)
    engine = Engine(model)
    chat = chat_format_of(tokenizer, meta)
    kind = "its chat format" if chat is not None else "a base model: it continues the text"
    print(f"tinylm: chatting with {meta['path']} ({kind}; window {window} tokens); Ctrl-D to quit", file=sys.stderr)
    if meta.get("decode_precision"):
        print(f"tinylm: {meta['decode_precision']}", file=sys.stderr)
    if chat is None and args.system:
        print("tinylm: --system is ignored: a base model has no system turn", file=sys.stderr)
    tools = get_tools(args.tools)
    check_can_call(tools, chat, meta["path"])
    conversation: Any = (Turns(chat, window, reply_room, args.system, tools) if chat is not None
                         else TextHistory(tokenizer, window, reply_room))
    scripted = not sys.stdin.isatty()
    shown = Shown(scripted)
    turn = 0
    try:
        while True:
            if not scripted:
                print("> ", end="", file=sys.stderr, flush=True)
            line = sys.stdin.readline()
            if not line:  # EOF (Ctrl-D or the end of piped input)
                break
            text = line.rstrip("\r\n")
            if text.strip() == "/reset":
                conversation.reset()
                print("tinylm: history cleared", file=sys.stderr)
                continue
            try:
                ids, dropped = conversation.prompt(text)
            except TinyLMError as exc:  # a message too long for the window: say so, keep chatting
                print(f"tinylm: {exc}", file=sys.stderr)
                shown.end()
                continue
            if dropped:
                print(f"tinylm: dropped the {dropped} oldest exchange(s) to stay within the {window}-token window",
                      file=sys.stderr)
            for _ in range(MAX_TURNS):  # a reply, and another after each round of tool results
                stream = TextStream(tokenizer)
                reply: list[int] = []
                for token in engine.stream(ids, conversation.room(ids), sampling, seed=args.seed + turn,
                                           stop_ids=conversation.stop_ids):
                    reply.append(token)
                    if not tools:  # with tools, a reply may be a call: only the final answer is shown
                        shown.write(stream.push(token))
                turn += 1
                try:
                    ids = conversation.add_reply(reply)
                except TinyLMError as exc:  # the tool results outgrew the window
                    print(f"tinylm: {exc}", file=sys.stderr)
                    break
                if ids is None:
                    shown.write(conversation.answer if tools else stream.flush())
                    break
            else:
                print(f"tinylm: no answer: each of the {MAX_TURNS} replies called a tool", file=sys.stderr)
            shown.end()
    except KeyboardInterrupt:
        print("", file=sys.stderr)
    return 0
