"""The mailbox that hands the scheduler's (or the engine reader's) events to the asyncio loop (serve/mailbox.py)."""

from __future__ import annotations

import asyncio
import threading
import time

from tinylm.serve.mailbox import Mailbox, held


async def _deliveries(hold: bool, items: int = 400) -> tuple[list[int], int]:
    """(what reached the queue, in order; how many times the loop delivered) for `items` posts from a thread that
    gives the interpreter lock away every 50 posts, as a busy machine makes it do."""
    mailbox = Mailbox(asyncio.get_running_loop())
    deliveries = 0
    deliver = mailbox._deliver

    def counting() -> None:
        nonlocal deliveries
        deliveries += 1
        deliver()

    mailbox._deliver = counting  # type: ignore[method-assign]
    queue: asyncio.Queue[int] = asyncio.Queue()

    def post_all() -> None:
        def posts() -> None:
            for i in range(items):
                mailbox.post(queue, i)
                if i % 50 == 49:
                    time.sleep(0.002)  # the loop's thread runs meanwhile

        if hold:
            with held():
                posts()
        else:
            posts()

    thread = threading.Thread(target=post_all)
    thread.start()
    got = [await queue.get() for _ in range(items)]
    thread.join()
    return got, deliveries


def test_a_burst_posted_inside_held_crosses_in_one_delivery() -> None:
    got, deliveries = asyncio.run(_deliveries(hold=True))
    assert got == list(range(400)) and deliveries == 1


def test_without_held_the_loop_takes_what_is_there_when_it_wakes() -> None:
    """What `held` is for: the same posts, not held, reach the loop in pieces (each still in order)."""
    got, deliveries = asyncio.run(_deliveries(hold=False))
    assert got == list(range(400)) and deliveries > 1


def test_held_nests_and_posts_after_it_wake_the_loop_at_once() -> None:
    async def main() -> tuple[list[int], list[int]]:
        mailbox, queue = Mailbox(asyncio.get_running_loop()), asyncio.Queue()
        with held():
            with held():
                mailbox.post(queue, 1)
            mailbox.post(queue, 2)  # still held: the outer block has not ended
            await asyncio.sleep(0.01)
            inside = [queue.get_nowait() for _ in range(queue.qsize())]
        mailbox.post(queue, 3)
        await asyncio.sleep(0.01)
        return inside, [queue.get_nowait() for _ in range(queue.qsize())]

    inside, after = asyncio.run(main())
    assert inside == [] and after == [1, 2, 3]
