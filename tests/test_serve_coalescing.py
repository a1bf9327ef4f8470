"""A stream that falls behind catches up in fewer chunks: events that piled up leave as one delta per choice."""

from __future__ import annotations

import asyncio

from serve_support import CORPUS
from tinylm.inference.sampling import GREEDY
from tinylm.serve.events import Finished, Token
from tinylm.serve.generation import Generation
from tinylm.serve.scheduler import Job
from tinylm.tokenizer import train_bpe


class IdleScheduler:
    """Takes jobs and cancels; the test hands the events over itself."""

    def submit(self, job: Job) -> Job:
        return job

    def cancel(self, job: Job, reason: str = "cancelled") -> None:
        pass


def deltas_of(burst: list[tuple[int, object]], choices: int, stops: list[str] | None = None) -> tuple[list, object]:
    """The deltas of one burst: every event arrived before the client read any (a client that lagged)."""
    tokenizer = train_bpe(CORPUS, vocab_size=320)

    async def run() -> list:
        jobs = [Job([1], 64, GREEDY, lambda _: None) for _ in range(choices)]
        generation = Generation(IdleScheduler(), tokenizer, jobs, stops or []).start()
        for item in burst:
            generation.queue.put_nowait(item)
        return [delta async for delta in generation.deltas()]

    return asyncio.run(run()), tokenizer


def test_a_burst_of_tokens_leaves_as_one_delta_with_every_token_and_the_same_text() -> None:
    tokenizer = train_bpe(CORPUS, vocab_size=320)
    ids = tokenizer.encode("def add(a, b):")
    burst = [(0, Token(i, logprob=-0.5)) for i in ids] + [(0, Finished("length"))]
    deltas, tokenizer = deltas_of(burst, 1)
    assert len(deltas) == 1
    (delta,) = deltas
    assert delta.text == "def add(a, b):" and delta.finish_reason == "length"
    assert [t.id for t in delta.tokens] == ids
    assert delta.offsets == [len(tokenizer.decode(ids[:k])) for k in range(len(ids))]


def test_two_choices_interleaved_in_one_burst_keep_their_own_text_and_endings() -> None:
    tokenizer = train_bpe(CORPUS, vocab_size=320)
    a, b = tokenizer.encode("class Point:"), tokenizer.encode("print(1)")
    burst = []
    for i in range(max(len(a), len(b))):
        burst += [(0, Token(a[i]))] if i < len(a) else []
        burst += [(1, Token(b[i]))] if i < len(b) else []
    deltas, _ = deltas_of(burst + [(0, Finished("stop")), (1, Finished("length"))], 2)
    text = {0: "", 1: ""}
    endings = {}
    for delta in deltas:
        assert delta.index not in endings  # nothing after a choice's ending
        text[delta.index] += delta.text
        if delta.finish_reason:
            endings[delta.index] = delta.finish_reason
    assert text == {0: "class Point:", 1: "print(1)"} and endings == {0: "stop", 1: "length"}
    assert len(deltas) == 2  # one per choice, each with its ending


def test_a_stop_string_inside_a_burst_ends_the_choice_there() -> None:
    tokenizer = train_bpe(CORPUS, vocab_size=320)
    ids = tokenizer.encode("def add(a, b):\n    return a + b\n")
    burst = [(0, Token(i)) for i in ids] + [(0, Finished("length"))]
    deltas, _ = deltas_of(burst, 1, stops=["return"])
    assert "".join(d.text for d in deltas) == "def add(a, b):\n    "
    assert [d.finish_reason for d in deltas][-1] == "stop" and sum(d.finish_reason is not None for d in deltas) == 1
