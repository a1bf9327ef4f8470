"""A reward function called where it can be stopped: in a worker thread, each call with a deadline.

A user's reward can hang (a network call, an infinite loop). Called in the training thread, it hangs
the run, and Ctrl-C cannot end it gracefully: the engine stops only at a step boundary, which the hung
call never reaches. So the calls of one batch run one after another in a daemon worker thread while
the training thread waits, a little at a time:

- a call past `timeout` seconds yields `RewardTimeout`; the worker is abandoned (a thread cannot be
  killed: it finishes that call alone and exits, being told to make no more) and a fresh one takes
  the next sample;
- when `should_stop()` says a stop was asked (Ctrl-C), the wait ends at once with `RewardsInterrupted`.

Daemon threads never keep the process alive, so an abandoned call cannot block the exit either.
"""

from __future__ import annotations

import queue
import threading
import time
from collections.abc import Callable, Iterator, Sequence
from typing import Any

from tinylm.errors import TinyLMError

POLL_S = 0.05  # how often a waiting training thread looks at `should_stop`
MAX_HUNG = 8  # reward threads left running past their timeout before the reward is refused
_HUNG: list[threading.Thread] = []  # those threads, in this process


class RewardTimeout(Exception):
    """A reward call that ran past its timeout (what a sample's value is then)."""


class RewardsInterrupted(Exception):
    """A stop was asked while rewards were being computed: the rest of the batch was not scored."""


def never() -> bool:
    return False


class _Worker:
    """Calls fn on pairs[start:] in order in a daemon thread, putting (index, value or exception) on `results`."""

    def __init__(self, fn: Callable[..., Any], pairs: Sequence[tuple[Any, ...]], start: int) -> None:
        self.results: queue.SimpleQueue[tuple[int, Any]] = queue.SimpleQueue()
        self.cancelled = threading.Event()
        self.thread = threading.Thread(target=self._run, args=(fn, pairs, start), daemon=True, name="tinylm-reward")
        self.thread.start()

    def _run(self, fn: Callable[..., Any], pairs: Sequence[tuple[Any, ...]], start: int) -> None:
        for index in range(start, len(pairs)):
            if self.cancelled.is_set():
                return
            try:
                value = fn(*pairs[index])
            except BaseException as exc:  # noqa: BLE001 - a user's reward may fail in any way (even sys.exit)
                value = exc
            self.results.put((index, value))


def _next_result(worker: _Worker, timeout: float | None, should_stop: Callable[[], bool]) -> tuple[int, Any] | None:
    """The worker's next (index, value), or None once `timeout` seconds have passed; RewardsInterrupted on a stop."""
    deadline = None if timeout is None else time.monotonic() + timeout
    while True:
        if should_stop():
            raise RewardsInterrupted
        wait = POLL_S if deadline is None else min(POLL_S, deadline - time.monotonic())
        if wait <= 0:
            return None
        try:
            return worker.results.get(timeout=wait)
        except queue.Empty:
            continue


def call_each(fn: Callable[..., Any], pairs: Sequence[tuple[Any, ...]], timeout: float | None = None,
              should_stop: Callable[[], bool] = never) -> Iterator[Any]:
    """fn(*pair) for each pair, in order: each result, or the exception it raised, or RewardTimeout.

    A call past its timeout is left to its thread; past MAX_HUNG such threads alive in the process, the reward is
    refused instead of starting another (a reward that hangs often would otherwise grow threads without end, and
    run its calls side by side)."""
    index = 0
    while index < len(pairs):
        _HUNG[:] = [thread for thread in _HUNG if thread.is_alive()]
        if len(_HUNG) >= MAX_HUNG:
            raise TinyLMError(f"the reward hung past --reward-timeout {timeout:g} s in {MAX_HUNG} calls that are still "
                              "running: fix the reward, or raise --reward-timeout")
        worker = _Worker(fn, pairs, index)
        try:
            while index < len(pairs):
                got = _next_result(worker, timeout, should_stop)
                if got is None:  # this call hangs: leave it to its thread, carry on in a fresh one
                    _HUNG.append(worker.thread)
                    yield RewardTimeout(f"took longer than {timeout:g} s (--reward-timeout)")
                    index += 1
                    break
                yield got[1]
                index += 1
        finally:
            worker.cancelled.set()  # an abandoned, finished or closed worker calls nothing more
