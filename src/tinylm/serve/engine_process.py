"""The scheduler in a process of its own, so decoding never waits for the HTTP side's Python.

In one process the scheduler thread and the asyncio loop share one interpreter lock. Every token's
event, text, JSON chunk and socket write then takes its turn with the decode step, and a small model
decodes at about half its in-process speed through the server. vLLM splits the same way (its engine
core runs in a process of its own). Here the child process owns the model and runs the `Scheduler`;
the server process keeps HTTP, text and JSON. They talk over one pipe:

    server -> engine   ("submit", id, job fields) · ("cancel", id, reason) · ("call", n, name, args)
    engine -> server   ("events", [(id, event), ...])   the steps' events, every stream_interval s (first tokens
                                                        and endings at once)
                       ("reply", n, ok, value)          the answer to a call (reload, metrics, stop)

`EngineClient` has the scheduler's interface (`submit`, `cancel`, `reload`, `start`, `stop`,
`metrics`), so the routes and `Generation` do not ask which one they drive. An engine process that
dies fails every running request with one line, and the server answers 503 from then on.
"""

from __future__ import annotations

import contextlib
import itertools
import multiprocessing
import signal
import sys
import threading
import time
from dataclasses import dataclass
from multiprocessing.connection import Connection
from types import SimpleNamespace
from typing import Any

import torch

from tinylm.errors import TinyLMError
from tinylm.inference.loading import load_for_generation
from tinylm.serve.events import Failed, Finished, Token
from tinylm.serve.mailbox import held
from tinylm.serve.reload import ReloadRefused
from tinylm.serve.scheduler import Job, Scheduler, fit_to_window

START_TIMEOUT_S = 600.0  # loading a large checkpoint and measuring its decode precision take a while
# a stream's tokens leave in one message per this many seconds (its first token and its ending at once): each message
# wakes the server and the client, whose Python shares the cores with decoding. One stream of the tiny model through
# the server, against the in-process engine, alternating: 0.70 at 2 ms, 0.76 at 4 ms, 0.78 at 8 ms, 0.82 at 16 ms
STREAM_INTERVAL_S = 0.008


@dataclass(frozen=True)
class EngineOptions:
    """How the engine process loads and runs the model (what `tinylm serve` was told)."""

    checkpoint: str
    int8: bool = False
    dtype: torch.dtype | None = None
    max_slots: int = 16
    prefill_budget: int = 64
    logprobs_mode: str = "raw"
    threads: int | None = None
    stream_interval: float = STREAM_INTERVAL_S  # seconds between two messages of a stream's tokens


class _Remote:
    """The metrics object of the engine process, as the /metrics route uses it."""

    def __init__(self, client: EngineClient) -> None:
        self.client = client

    def render(self) -> str:
        return self.client.call("metrics")


class EngineClient:
    """The server process's side: the scheduler's interface over the pipe."""

    def __init__(self, options: EngineOptions, config: Any) -> None:
        self.options = options
        self.model = SimpleNamespace(config=config)  # the routes read the window and vocabulary from it
        self.window = config.context_length
        self.jobs: dict[int, Job] = {}
        self.ids = itertools.count()
        self.send_lock = threading.Lock()
        self.replies: dict[int, tuple[threading.Event, list[Any]]] = {}
        self.dead: str | None = None  # why the engine process is gone
        self.logprobs_mode = options.logprobs_mode
        self.precision = ""  # how the engine process decodes (its decode-precision line), once started
        self.metrics = _Remote(self)
        self.conn: Connection | None = None
        self.process: multiprocessing.process.BaseProcess | None = None
        self.thread = threading.Thread(target=self._read, name="tinylm-engine-reader", daemon=True)

    # ---- starting and stopping ----------------------------------------------------------------------
    def start(self) -> EngineClient:
        """Start the engine process and wait until its model is loaded (TinyLMError if it cannot be)."""
        context = multiprocessing.get_context("spawn")  # a fresh interpreter: no copy of this one's threads
        self.conn, child = context.Pipe()
        self.process = context.Process(target=engine_main, args=(child, self.options), name="tinylm-engine",
                                       daemon=True)
        self.process.start()
        child.close()
        if not self.conn.poll(START_TIMEOUT_S):
            self.process.kill()
            raise TinyLMError(f"the engine process did not load {self.options.checkpoint} within "
                              f"{START_TIMEOUT_S:g} s")
        try:
            kind, value = self.conn.recv()
        except (EOFError, OSError):
            self.process.join(10)
            raise TinyLMError(f"the engine process exited while loading {self.options.checkpoint} (exit code "
                              f"{self.process.exitcode})") from None
        if kind != "ready":
            self.process.join(10)
            raise TinyLMError(value)
        self.precision = value
        self.thread.start()
        return self

    def stop(self, timeout: float = 30.0) -> None:
        """Let the running requests finish (new ones are refused), then end the engine process."""
        if self.process is None or self.dead is not None:
            return
        with contextlib.suppress(RuntimeError):  # it is gone already
            self.call("stop", timeout, wait=timeout + 10)
        self.process.join(10)
        if self.process.is_alive():
            self.process.kill()

    # ---- requests -------------------------------------------------------------------------------------
    def submit(self, job: Job) -> Job:
        fit_to_window(job, self.window)
        if self.dead is not None:
            raise RuntimeError(self.dead)
        number = job.engine_id = next(self.ids)
        self.jobs[number] = job
        try:
            self._send(("submit", number, job.prompt, job.max_tokens, job.sampling, job.seed, job.stop_ids,
                        job.logprobs, job.prompt_logprobs))
        except RuntimeError:
            self.jobs.pop(number, None)
            raise
        return job

    def cancel(self, job: Job, reason: str = "cancelled") -> None:
        if job.engine_id in self.jobs and self.dead is None:
            self._send(("cancel", job.engine_id, reason))

    def reload(self, checkpoint: str, int8: bool, timeout: float) -> dict[str, Any]:
        return self.call("reload", checkpoint, timeout, wait=None)

    def call(self, name: str, *args: Any, wait: float | None = 60.0) -> Any:
        """Run `name` in the engine process and return its value (its ReloadRefused or RuntimeError raised here)."""
        if self.dead is not None:
            raise RuntimeError(self.dead)
        number = next(self.ids)
        done, box = threading.Event(), []
        self.replies[number] = (done, box)
        try:
            self._send(("call", number, name, args))
            if not done.wait(wait):
                raise RuntimeError(f"the engine process did not answer {name!r} within {wait:g} s")
        finally:
            self.replies.pop(number, None)
        ok, value = box[0]
        if ok:
            return value
        raise value

    def _send(self, message: tuple) -> None:
        with self.send_lock:
            try:
                self.conn.send(message)
            except (OSError, ValueError) as exc:
                raise RuntimeError(f"the engine process is gone ({exc})") from None

    # ---- what comes back ------------------------------------------------------------------------------
    def _read(self) -> None:
        while True:
            try:
                message = self.conn.recv()
            except (EOFError, OSError):
                self._died()
                return
            except Exception as exc:  # noqa: BLE001 - a message that cannot be read must not end the reading
                print(f"tinylm: unreadable message from the engine process: {type(exc).__name__}: {exc}",
                      file=sys.stderr)
                continue
            if message[0] == "events":
                with held():  # the message's events reach each request's loop together
                    for number, event in message[1]:
                        job = self.jobs.get(number)
                        if job is None:
                            continue
                        if isinstance(event, Finished | Failed):
                            del self.jobs[number]
                        job.on_event(event)
            elif message[0] == "reply":
                _, number, ok, value = message
                waiting = self.replies.get(number)
                if waiting is not None:  # (a call that timed out has stopped waiting)
                    waiting[1].append((ok, value))
                    waiting[0].set()

    def _died(self) -> None:
        code = None
        if self.process is not None:
            self.process.join(5)  # the pipe closes as the process ends: wait for its exit code
            code = self.process.exitcode
        self.dead = f"the engine process has exited (exit code {code})"
        for job in list(self.jobs.values()):
            job.on_event(Failed(self.dead))
        self.jobs.clear()
        for done, box in list(self.replies.values()):
            box.append((False, RuntimeError(self.dead)))
            done.set()
        self.replies.clear()


# ---- the engine process -------------------------------------------------------------------------------
def engine_main(conn: Connection, options: EngineOptions) -> None:
    """Load the model, run the scheduler, and serve the pipe until told to stop or the server goes away."""
    # Ctrl-C and a SIGTERM to the whole group (systemd, `kill -- -PGID`) reach us too: the server drains us, and
    # if it dies, the pipe's end ends us
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    signal.signal(signal.SIGTERM, signal.SIG_IGN)
    if options.threads is not None:
        torch.set_num_threads(options.threads)
    try:
        model, _, meta = load_for_generation(options.checkpoint, int8=options.int8, dtype=options.dtype)
        scheduler = Scheduler(model, max_slots=options.max_slots, prefill_budget=options.prefill_budget,
                              logprobs_mode=options.logprobs_mode)
    except Exception as exc:  # noqa: BLE001 - the server prints it as one line and exits 1
        conn.send(("failed", str(exc) if isinstance(exc, TinyLMError) else f"the engine process could not "
                   f"start: {type(exc).__name__}: {str(exc).splitlines()[0] if str(exc) else ''}"))
        return
    outbox = _Outbox(conn, options.stream_interval)
    scheduler.after_step = lambda: outbox.flush_now_and_then(scheduler)
    scheduler.start()
    conn.send(("ready", meta["decode_precision"]))
    _serve_pipe(conn, scheduler, outbox, options)


def _serve_pipe(conn: Connection, scheduler: Scheduler, outbox: _Outbox, options: EngineOptions) -> None:
    jobs: dict[int, Job] = {}
    while True:
        try:
            message = conn.recv()
        except (EOFError, OSError):  # the server is gone: nobody is left to answer
            scheduler.stop(0)
            return
        kind = message[0]
        if kind == "submit":
            _, number, prompt, max_tokens, sampling, seed, stop_ids, logprobs, prompt_logprobs = message
            job = Job(prompt, max_tokens, sampling, outbox.collector(number, jobs), seed=seed, stop_ids=stop_ids,
                      logprobs=logprobs, prompt_logprobs=prompt_logprobs)
            jobs[number] = job
            try:
                scheduler.submit(job)
            except (ValueError, RuntimeError) as exc:
                jobs.pop(number, None)
                outbox.post(number, Failed(str(exc)))
                outbox.flush()
        elif kind == "cancel":
            job = jobs.get(message[1])
            if job is not None:
                scheduler.cancel(job, message[2])
        elif kind == "call":
            _, number, name, args = message
            if name == "stop":
                scheduler.stop(*args)
                outbox.flush()
                outbox.reply(number, True, None)
                return
            # a reload waits for the running requests: answer it from a thread, keep reading the pipe
            threading.Thread(target=_answer, args=(outbox, number, scheduler, name, args, options),
                             daemon=True).start()


def _answer(outbox: _Outbox, number: int, scheduler: Scheduler, name: str, args: tuple,
            options: EngineOptions) -> None:
    try:
        if name == "reload":
            checkpoint, timeout = args
            value = scheduler.reload(checkpoint, options.int8, timeout)
        elif name == "metrics":
            value = scheduler.metrics.render()
        else:
            raise RuntimeError(f"the engine process has no call {name!r}")
        outbox.reply(number, True, value)
    except ReloadRefused as exc:
        outbox.reply(number, False, exc)
    except Exception as exc:  # noqa: BLE001 - the server must hear of it, not wait forever
        print(f"tinylm engine: {name} failed: {type(exc).__name__}: {exc}", file=sys.stderr)
        outbox.reply(number, False, RuntimeError(f"{type(exc).__name__}: {exc}"))


class _Outbox:
    """Events collected during a scheduler step, sent as one message when it ends."""

    def __init__(self, conn: Connection, interval: float) -> None:
        self.conn, self.lock, self.send_lock = conn, threading.Lock(), threading.Lock()
        self.pending: list[tuple[int, object]] = []
        self.urgent = False  # a first token or an ending is waiting
        self.sent_at = 0.0
        self.interval = interval

    def collector(self, number: int, jobs: dict[int, Job]):
        """The on_event of job `number`: its events wait for the step's end; its ending forgets the job. Its first
        token and its ending leave with that step, whenever the last send was: a client's time to first token,
        and the moment a client learns it may send its next request, never wait for the interval."""
        started = False

        def on_event(event: object) -> None:
            nonlocal started
            ends = isinstance(event, Finished | Failed)
            first = isinstance(event, Token) and not started
            started = started or first
            self.post(number, event, urgent=first or ends)
            if ends:
                jobs.pop(number, None)

        return on_event

    def post(self, number: int, event: object, urgent: bool = False) -> None:
        with self.lock:
            self.pending.append((number, event))
            self.urgent = self.urgent or urgent

    def flush(self) -> None:
        with self.send_lock:  # taken first: two flushing threads send their events in the order they took them
            with self.lock:
                events, self.pending, self.urgent = self.pending, [], False
            if events:
                with contextlib.suppress(OSError, ValueError):  # the server is gone: the pipe loop ends
                    self.conn.send(("events", events))

    def flush_now_and_then(self, scheduler: Scheduler) -> None:
        """After a step: send what it produced once the interval has passed since the last send, at once when it
        holds a first token or an ending, or when nothing runs any more (a request's last events never wait for
        a step that will not come)."""
        now = time.perf_counter()
        if self.urgent or now - self.sent_at >= self.interval or not (scheduler.running or scheduler.prefilling):
            self.sent_at = now
            self.flush()

    def reply(self, number: int, ok: bool, value: Any) -> None:
        self._send(("reply", number, ok, value))

    def _send(self, message: tuple) -> None:
        with self.send_lock, contextlib.suppress(OSError, ValueError):  # the server is gone: the pipe loop ends
            self.conn.send(message)
