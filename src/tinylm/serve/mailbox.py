"""Handing events from the scheduler thread to the asyncio loop: one wake-up per burst, not per token.

`loop.call_soon_threadsafe` writes to the loop's self-pipe each time it is called; with 16 streams a
decode step would wake the loop 16 times. A mailbox collects (queue, event) pairs from the thread and
asks the loop to empty it only when it is not already going to, so a whole step's tokens cross in
one wake-up, and each event still lands in its own request's asyncio queue, in order.

That alone holds only while the posting thread keeps the interpreter lock: the woken loop takes
what is there when it gets the lock, and on a busy machine it got a 400-token message of the engine
process in up to 11 pieces. A thread that posts a burst inside `held()` wakes each mailbox once, at
the end, so the loop finds the whole burst.
"""

from __future__ import annotations

import asyncio
import contextlib
import threading
import weakref
from collections import deque
from collections.abc import Iterator

_held = threading.local()  # .mailboxes: the mailboxes this thread's posts are waiting to wake (inside `held`)


@contextlib.contextmanager
def held() -> Iterator[None]:
    """Posts from this thread inside the block wake their loops once, when it ends (a burst crosses whole)."""
    if getattr(_held, "mailboxes", None) is not None:  # already inside one
        yield
        return
    _held.mailboxes = waiting = []
    try:
        yield
    finally:
        _held.mailboxes = None
        for mailbox in waiting:
            mailbox.wake()


class Mailbox:
    def __init__(self, loop: asyncio.AbstractEventLoop) -> None:
        self.loop = loop
        self.pending: deque[tuple[asyncio.Queue, object]] = deque()
        self.lock = threading.Lock()
        self.scheduled = False

    def post(self, queue: asyncio.Queue, item: object) -> None:
        """From any thread: `item` will be put on `queue` by the loop (at the end of `held` when inside one)."""
        waiting = getattr(_held, "mailboxes", None)
        with self.lock:
            self.pending.append((queue, item))
            if self.scheduled:
                return
            if waiting is None:
                self.scheduled = True
        if waiting is None:
            self._schedule()
        elif self not in waiting:
            waiting.append(self)

    def wake(self) -> None:
        """Ask the loop to deliver what is pending, unless it is already going to or nothing is."""
        with self.lock:
            if self.scheduled or not self.pending:
                return
            self.scheduled = True
        self._schedule()

    def _schedule(self) -> None:
        with contextlib.suppress(RuntimeError):  # a closed loop: nobody is listening any more
            self.loop.call_soon_threadsafe(self._deliver)

    def _deliver(self) -> None:
        with self.lock:
            items, self.pending = self.pending, deque()
            self.scheduled = False
        for queue, item in items:
            queue.put_nowait(item)


_MAILBOXES: weakref.WeakKeyDictionary[asyncio.AbstractEventLoop, Mailbox] = weakref.WeakKeyDictionary()


def mailbox_of(loop: asyncio.AbstractEventLoop) -> Mailbox:
    """The one mailbox of `loop` (called on the loop's own thread)."""
    if loop not in _MAILBOXES:
        _MAILBOXES[loop] = Mailbox(loop)
    return _MAILBOXES[loop]
