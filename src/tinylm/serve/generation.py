"""The choices of one HTTP request, driven through the scheduler and turned back into text.

A request with several prompts or `n > 1` becomes several scheduler jobs; their events come back
through one asyncio queue (the scheduler thread hands them over through the loop's mailbox), and
`deltas()` yields, in arrival order, each choice's new text with the tokens that made it, then its
ending. Text passes `TextStream` (whole characters only) and `StopStrings` (a stop string is cut and
ends that choice). A special token is never text: a role marker a chat model writes is counted and
has its log-prob, but "<|system|>" never appears in a reply. Leaving `deltas()` early (a client that
went away) cancels every unfinished job.

A chat model that speaks tools writes segments: reasoning between <|think|> and <|/think|>, calls
between <|call|> and <|/call|>, content elsewhere. Given the agent ids, each delta says which segment
its text belongs to (and which call, counted from 1), text of two segments never shares a delta, and
stop strings apply to content only.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Mapping
from dataclasses import dataclass, field
from typing import Any

from tinylm.inference.streaming import TextStream
from tinylm.serve.events import Failed, Finished, PromptLogprobs, Token
from tinylm.serve.mailbox import Mailbox, mailbox_of
from tinylm.serve.protocol import APIError
from tinylm.serve.scheduler import Job, Scheduler
from tinylm.serve.text import StopStrings
from tinylm.tokenizer.chat_tokens import CALL, END_CALL, END_THINK, THINK

SEGMENT_AFTER = {THINK: "reasoning", END_THINK: "content", CALL: "call", END_CALL: "content"}


@dataclass
class Delta:
    """New text of choice `index` and the tokens it came from (each with its offset in the choice's text)."""

    index: int
    text: str
    tokens: list[Token] = field(default_factory=list)
    offsets: list[int] = field(default_factory=list)
    finish_reason: str | None = None
    segment: str = "content"  # "content", "reasoning" or "call"
    call: int = 0  # which call of the choice a "call" segment is (1, 2, ...)


@dataclass
class Choice:
    index: int
    job: Job
    stream: TextStream
    stops: StopStrings
    completion_tokens: int = 0
    chars: int = 0  # characters of text decoded so far (the offset of the next token)
    tokens: list[Token] = field(default_factory=list)  # waiting to leave with the next text
    offsets: list[int] = field(default_factory=list)
    prompt_logprobs: PromptLogprobs | None = None
    finish_reason: str | None = None
    segment: str = "content"
    calls: int = 0  # calls opened so far


class Generation:
    def __init__(self, scheduler: Scheduler, tokenizer: Any, jobs: list[Job], stops: list[str],
                 agent_ids: Mapping[str, int] | None = None, segment: str = "content") -> None:
        """`agent_ids`: a tool-speaking chat format's marker ids (segments); `segment`: where replies start
        ("call" when the prompt already opened one)."""
        self.scheduler, self.tokenizer = scheduler, tokenizer
        self.special_ids = frozenset(getattr(tokenizer, "special_tokens", {}).values())
        self.markers = {} if agent_ids is None else {agent_ids[token]: token for token in SEGMENT_AFTER}
        self.queue: asyncio.Queue[tuple[int, object]] = asyncio.Queue()
        mailbox = mailbox_of(asyncio.get_running_loop())
        self.choices = []
        for index, job in enumerate(jobs):
            job.on_event = _deliver(mailbox, self.queue, index)
            self.choices.append(Choice(index, job, TextStream(tokenizer), StopStrings(stops), segment=segment,
                                       calls=int(segment == "call")))

    def start(self) -> Generation:
        try:
            for choice in self.choices:
                self.scheduler.submit(choice.job)
        except (ValueError, RuntimeError) as exc:
            self.cancel()
            raise APIError(503 if isinstance(exc, RuntimeError) else 400, str(exc)) from None
        return self

    def cancel(self) -> None:
        for choice in self.choices:
            if choice.finish_reason is None:
                self.scheduler.cancel(choice.job)

    async def deltas(self) -> AsyncIterator[Delta]:
        unfinished = len(self.choices)
        try:
            while unfinished:
                events = [await self.queue.get()]
                while not self.queue.empty():  # the client lagged: what piled up leaves as one delta per choice
                    events.append(self.queue.get_nowait())
                for delta in self._merged(events):
                    yield delta
                    if delta.finish_reason is not None:
                        unfinished -= 1
        finally:
            self.cancel()

    def _merged(self, events: list[tuple[int, object]]) -> list[Delta]:
        """The deltas of a burst of events, one per choice (in the order the choices first appear).

        Each delta, JSON chunk and socket write costs the server about as much as a decode step of a
        small model; a stream that has fallen behind catches up in fewer, longer chunks.
        """
        merged: dict[int, list[Delta]] = {}
        for index, event in events:
            choice = self.choices[index]
            if choice.finish_reason is not None:
                continue  # ended (in this burst or before): what a stop string's cancel could not stop in time
            delta = self._apply(choice, event)
            if delta is None:
                continue
            run = merged.setdefault(index, [])
            if run and (run[-1].segment, run[-1].call) == (delta.segment, delta.call):
                earlier = run.pop()
                delta = Delta(index, earlier.text + delta.text, earlier.tokens + delta.tokens,
                              earlier.offsets + delta.offsets, delta.finish_reason, delta.segment, delta.call)
            run.append(delta)
        return [delta for run in merged.values() for delta in run]

    def _apply(self, choice: Choice, event: object) -> Delta | None:
        if isinstance(event, PromptLogprobs):
            choice.prompt_logprobs = event
            return None
        if isinstance(event, Failed):
            raise APIError(500, f"generation failed: {event.message}", type="server_error")
        if isinstance(event, Finished):
            choice.finish_reason = "length" if event.reason == "length" else "stop"
            return self._take(choice, self._flush(choice), choice.finish_reason)
        assert isinstance(event, Token)
        choice.completion_tokens += 1
        choice.tokens.append(event)
        choice.offsets.append(choice.chars)
        if event.stop:
            return None  # no text; the ending that follows carries it out with the log-probs
        if event.id in self.markers:  # a segment ends: its text leaves now, the next one starts
            text = self._flush(choice)
            delta = self._take(choice, text, None) if text else None
            choice.segment = SEGMENT_AFTER[self.markers[event.id]]
            choice.calls += choice.segment == "call"
            return delta
        if event.id in self.special_ids:
            return None  # markup, not text: it leaves with the next text's tokens
        piece = choice.stream.push(event.id)
        choice.chars += len(piece)
        if choice.segment != "content":
            return self._take(choice, piece, None) if piece else None
        text = choice.stops.push(piece)
        if choice.stops.stopped:
            choice.finish_reason = "stop"
            self.scheduler.cancel(choice.job, "stop")
            return self._take(choice, text, "stop")
        return self._take(choice, text, None) if text else None

    @staticmethod
    def _flush(choice: Choice) -> str:
        """The text the decoder (and, for content, the stop strings) still holds."""
        text = choice.stream.flush()
        return text if choice.segment != "content" else choice.stops.push(text) + choice.stops.flush()

    @staticmethod
    def _take(choice: Choice, text: str, finish_reason: str | None) -> Delta:
        delta = Delta(choice.index, text, choice.tokens, choice.offsets, finish_reason, choice.segment,
                      choice.calls if choice.segment == "call" else 0)
        choice.tokens, choice.offsets = [], []
        return delta


def _deliver(mailbox: Mailbox, queue: asyncio.Queue, index: int):
    def on_event(event: object) -> None:
        mailbox.post(queue, (index, event))

    return on_event
