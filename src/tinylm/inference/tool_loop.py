"""The tool loop: generate, run the calls the model wrote, append their results, generate again, up to a turn limit.

    runs = run_with_tools(generate, chat, prompts, get_tools("calculator"), max_new_tokens=48)
    runs[0].final        # the last assistant content: what a verifier reads
    runs[0].ids          # the whole context the model saw, token for token
    runs[0].policy       # 1 on the tokens the model generated, 0 on the prompt and every tool result

All conversations advance together: each round generates one assistant turn for every conversation
still going, in one batch. The context is kept as ids, never re-rendered from text, so the next
round's prompt is exactly the ids the model produced plus the tool turns (`<|tool|> result <|end|>`)
and the next `<|assistant|>`; a re-tokenized reply could differ from what was sampled. A call that
is malformed, names no known tool, or fails becomes an "error: ..." result like any other, so a
conversation never crashes on what the model wrote. It ends when a reply makes no call ("answer"),
after `max_turns` replies ("turns"), or when the window has no room left for a reply ("window").
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from tinylm.tokenizer.chat_format import ChatFormat
from tinylm.tokenizer.reply_parser import parse_reply
from tinylm.tools.registry import Tool
from tinylm.tools.run_call import CallResult, run_call

# (prompts as ids, each one's token limit, which conversation each is) -> each one's new ids, the stop token
# excluded (or, with keeps_stop, included when a reply stopped: RL records the log-prob of the very token)
Generate = Callable[[list[list[int]], list[int], list[int]], list[list[int]]]
MAX_TURNS = 4


@dataclass
class ToolRun:
    """One conversation after the loop: what was added after the prompt, and the context as ids."""

    messages: list[dict[str, Any]] = field(default_factory=list)  # assistant and tool turns, in order
    ids: list[int] = field(default_factory=list)
    policy: list[int] = field(default_factory=list)  # 1 where the model generated the id
    calls: int = 0
    failed_calls: int = 0  # malformed, to an unknown tool, or a tool that failed
    stopped: str = "answer"

    @property
    def final(self) -> str:
        """The content of the last assistant turn ("" when the loop stopped before an answer)."""
        replies = [m for m in self.messages if m["role"] == "assistant"]
        return replies[-1]["content"] if replies and self.stopped == "answer" else ""


def _tool_turn(chat: ChatFormat, result: str) -> list[int]:
    return [chat.role_ids["tool"], *chat.content_ids(result), chat.end_id]


def run_with_tools(generate: Generate, chat: ChatFormat, prompts: Sequence[Sequence[Mapping[str, Any]]],
                   tools: list[Tool], max_new_tokens: int, window: int, max_turns: int = MAX_TURNS,
                   call: Callable[[str, str, list[Tool]], CallResult] = run_call,
                   keeps_stop: bool = False) -> list[ToolRun]:
    """Run every prompt conversation through the tool loop (see the module docstring).

    With `keeps_stop`, `generate` returns a stopped reply with the stop token it sampled, which then
    stands in the context as it was sampled (end-of-text too); otherwise <|end|> closes every reply.
    """
    runs = [ToolRun() for _ in prompts]
    for run, prompt in zip(runs, prompts):
        run.ids = chat.prompt_ids(prompt)[:-1]  # the assistant header is added each round
        run.policy = [0] * len(run.ids)
    active = list(range(len(runs)))
    for turn in range(max_turns):
        heads = {i: [*runs[i].ids, chat.role_ids["assistant"]] for i in active}
        for i in [i for i in active if len(heads[i]) >= window]:
            runs[i].stopped = "window"
        active = [i for i in active if len(heads[i]) < window]
        if not active:
            break
        limits = [min(max_new_tokens, window - len(heads[i])) for i in active]
        replies = generate([heads[i] for i in active], limits, active)
        still = []
        for i, new, limit in zip(active, replies, limits, strict=True):
            run = runs[i]
            if keeps_stop:
                stopped = bool(new) and new[-1] in chat.stop_ids
                text, ending = (new[:-1], []) if stopped else (new, [chat.end_id])
            else:
                stopped, text, ending = len(new) < limit, new, [chat.end_id]  # stopped: not cut by the limit
            run.ids = [*heads[i], *new, *ending]
            run.policy += [0, *[1] * len(new), *[int(stopped and not keeps_stop)] * len(ending)]
            reply = parse_reply(chat, text)
            run.messages.append(reply.message())
            if not reply.calls:
                continue
            if turn == max_turns - 1:
                run.stopped = "turns"
                continue
            for parsed in reply.calls:
                result = (CallResult(f"error: malformed call: {parsed.error}", False) if parsed.error
                          else call(parsed.name, parsed.arguments, tools))
                run.calls += 1
                run.failed_calls += not result.ok
                turn_ids = _tool_turn(chat, result.content)
                run.ids += turn_ids
                run.policy += [0] * len(turn_ids)
                run.messages.append({"role": "tool", "content": result.content})
            still.append(i)
        active = still
    return runs
