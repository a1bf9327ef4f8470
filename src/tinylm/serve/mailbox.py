"""Handing events from the scheduler thread to the asyncio loop: one wake-up per burst, not per token.

`loop.call_soon_threadsafe` writes to the loop's self-pipe each time it is called; with 16 streams a
decode step would wake the loop 16 times. A mailbox collects (queue, event) pairs from the thread and
asks the loop to empty it only when it is not already going to, so a whole step's tokens cross in
one wake-up, and each event still lands in its own request's asyncio queue, in order.
"""

from __future__ import annotations

import asyncio
import contextlib
import threading
import weakref
from collections import deque


class Mailbox:
    def __init__(self, loop: asyncio.AbstractEventLoop) -> None:
        self.loop = loop
        self.pending: deque[tuple[asyncio.Queue, object]] = deque()
        self.lock = threading.Lock()
        self.scheduled = False

    def post(self, queue: asyncio.Queue, item: object) -> None:
        """From any thread: `item` will be put on `queue` by the loop."""
        with self.lock:
            self.pending.append((queue, item))
            if self.scheduled:
                return
            self.scheduled = True
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
