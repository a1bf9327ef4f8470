"""Continuous batching: one thread owns the model and advances every request one step at a time.

Each step of the loop:

1. admit waiting requests while slots are free (a slot = a row of the batch);
2. prefill: compute up to `prefill_budget` prompt tokens of the requests being admitted, in chunks,
   so a long prompt costs the running streams one chunk of latency per step, never the whole prompt;
   a finished prompt samples its first token and joins the batch;
3. decode: one batched forward pass gives every running row its next token;
4. rows that stopped (a stop token, their token limit, the window, a cancel) leave at once, so
   their slot is free for the next step.

Requests talk to the loop only through `submit` / `cancel` and the events they receive (events.py),
delivered by a callback the handler supplies (it forwards them into its asyncio queue). Every
request samples by inverse CDF from its own seeded uniforms (`sequence_uniforms`), so its draws never
depend on its neighbours, and a seeded request draws what `tinylm rl` draws in-process. Only float
rounding can tell them apart: a batch's matrix products and attention path depend on its rows, and
a token whose uniform falls within rounding of a step of the CDF could then differ.

A new model (`swap_model`: the same config, new weights) waits until the running requests have
finished; requests that arrive meanwhile wait in line and are served by the new weights.
"""

from __future__ import annotations

import secrets
import threading
import time
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import torch
from torch import nn

from tinylm.inference.sampling import SamplingParams, sequence_uniforms
from tinylm.serve.events import Event, Failed, Finished, PromptLogprobs, Token
from tinylm.serve.metrics import ServerMetrics
from tinylm.serve.reload import reload_weights
from tinylm.serve.row_sampling import row_logprobs, sample_rows
from tinylm.serve.slots import Prefill, make_batch


@dataclass(eq=False)
class Job:
    """One generation as the scheduler sees it (token ids in, events out)."""

    prompt: list[int]
    max_tokens: int
    sampling: SamplingParams
    on_event: Callable[[Event], None]
    seed: int | None = None
    stop_ids: frozenset[int] = frozenset()
    logprobs: int | None = None  # None: none; k: the chosen token's log-prob and the k most likely
    prompt_logprobs: bool = False
    # the loop's bookkeeping
    arrived: float = field(default_factory=time.perf_counter)
    cancel_reason: str | None = None
    generated: int = 0
    pending: int = 0  # the newest token, fed at the next decode step
    last_token_at: float = 0.0
    prefill: Prefill | None = None
    uniforms: list[float] | None = None  # token t is drawn from uniforms[t] (float64, from the seed)
    engine_id: int | None = None  # its number on an engine process's pipe (engine_process.py)


LOGPROBS_MODES = ("raw", "processed")  # vLLM's raw_logprobs / processed_logprobs


@dataclass
class _Swap:
    """A model waiting to replace the served one, and the event its caller waits on."""

    model: nn.Module
    done: threading.Event = field(default_factory=threading.Event)


class Scheduler:
    def __init__(self, model: nn.Module, max_slots: int = 16, prefill_budget: int = 64,
                 metrics: ServerMetrics | None = None, logprobs_mode: str = "raw") -> None:
        if logprobs_mode not in LOGPROBS_MODES:
            raise ValueError(f"logprobs_mode is one of {LOGPROBS_MODES}, got {logprobs_mode!r}")
        self.logprobs_mode = logprobs_mode  # raw: log softmax(logits); processed: of what the token was drawn from
        self.model = model.eval()
        self.window = model.config.context_length
        self.max_slots, self.prefill_budget = max_slots, prefill_budget
        self.metrics = metrics or ServerMetrics()
        self.device = next(model.parameters()).device
        self.batch = make_batch(model, max_slots)
        self.waiting: deque[Job] = deque()
        self.prefilling: list[Job] = []
        self.running: list[Job] = []  # running[i] is in row i of the batch
        self.wake = threading.Condition()
        self.stopping = False
        self.swap: _Swap | None = None
        self.dead: str | None = None  # a thread does not die apart from its server (EngineClient's process may)
        self.next_tokens: torch.Tensor | None = None  # the last step's tokens [rows]: the next step's input
        self.cancels = 0  # cancels not yet acted on: a step looks for cancelled jobs only when there are some
        self.after_step: Callable[[], None] | None = None  # the engine process sends each step's events here
        self.thread = threading.Thread(target=self._loop, name="tinylm-scheduler", daemon=True)

    # ---- the handlers' side ---------------------------------------------------------------------------
    def start(self) -> Scheduler:
        self.thread.start()
        return self

    def submit(self, job: Job) -> Job:
        fit_to_window(job, self.window)
        with self.wake:
            if self.stopping:
                raise RuntimeError("the server is shutting down")
            self.waiting.append(job)
            self._count_queues()
            self.wake.notify()
        return job

    def cancel(self, job: Job, reason: str = "cancelled") -> None:
        """Take `job` out at the next step (a client went away, or a stop string ended it)."""
        with self.wake:
            if job.cancel_reason is None:
                job.cancel_reason = reason
                self.cancels += 1
            self.wake.notify()

    def swap_model(self, model: nn.Module, timeout: float | None = None) -> bool:
        """Serve `model` from the next request on, once the running ones have finished; True when it is in."""
        with self.wake:
            if self.stopping:
                raise RuntimeError("the server is shutting down")
            swap = self.swap = _Swap(model.eval())
            self.wake.notify()
        return swap.done.wait(timeout)

    def reload(self, checkpoint: str, int8: bool, timeout: float) -> dict[str, Any]:
        """Serve `checkpoint`'s weights from the next request on (reload.py; ReloadRefused says why not)."""
        return reload_weights(self, checkpoint, int8, timeout)

    def stop(self, timeout: float = 30.0) -> None:
        """Finish what is running (new requests are refused), then end the thread."""
        with self.wake:
            self.stopping = True
            self.wake.notify()
        if self.thread.is_alive():
            self.thread.join(timeout)

    # ---- the loop -------------------------------------------------------------------------------------
    def _loop(self) -> None:
        with torch.inference_mode():
            while True:
                with self.wake:
                    while not (self.waiting or self.prefilling or self.running or self.stopping or self.swap):
                        self.wake.wait()
                    self._swap_when_idle()
                    if self.stopping and not (self.waiting or self.prefilling or self.running):
                        return
                try:
                    with self.wake:
                        self.admit()
                    self.step()
                except Exception as exc:  # noqa: BLE001 - one bad step must not take the server down
                    self._fail_everyone(f"{type(exc).__name__}: {exc}")
                if self.after_step is not None:
                    self.after_step()

    def _swap_when_idle(self) -> None:
        """Put a waiting model in once nothing runs (the batch's fused weights are rebuilt from it)."""
        if self.swap is None or self.prefilling or self.running:
            return
        self.model, self.batch = self.swap.model, make_batch(self.swap.model, self.max_slots)
        self.swap.done.set()
        self.swap = None

    def admit(self) -> None:
        """Move waiting jobs into free slots. Jobs with the same prompt (a request's `n` choices) share one
        prefill: it is computed once and copied into each of their rows, as each would compute it alone."""
        shared = {(tuple(j.prompt), j.prompt_logprobs): j.prefill for j in self.prefilling}
        while self.waiting and self.swap is None and len(self.running) + len(self.prefilling) < self.max_slots:
            job = self.waiting.popleft()
            key = (tuple(job.prompt), job.prompt_logprobs)
            if key not in shared:
                shared[key] = Prefill(job.prompt, keep_all_logits=job.prompt_logprobs)
            job.prefill = shared[key]
            if not job.sampling.greedy:
                seed = job.seed if job.seed is not None else secrets.randbits(63)
                job.uniforms = sequence_uniforms([seed], max(job.max_tokens, 1))[0].tolist()
            self.prefilling.append(job)
        self._count_queues()

    def step(self) -> None:
        """One round: drop the cancelled, spend the prefill budget, decode every running row once."""
        self._drop_cancelled()
        budget = self.prefill_budget
        for job in list(self.prefilling):
            if not job.prefill.finished:  # (a shared prefill is finished when its first job's is)
                if budget <= 0:
                    continue
                spent = self.batch.prefill(job.prefill, budget)
                budget -= spent
                with self.metrics.lock:
                    self.metrics.prompt_tokens += spent
            if job.prefill.finished:
                self.prefilling.remove(job)
                self._prompt_done(job)
        if self.running:
            tokens = self.next_tokens
            if tokens is None or tokens.shape[0] != len(self.running):  # rows joined or left: gather them
                tokens = torch.tensor([job.pending for job in self.running], dtype=torch.long, device=self.device)
            logits = self.batch.decode(tokens)
            self._emit_tokens(self.running, logits)
        self._count_queues()

    def _prompt_done(self, job: Job) -> None:
        prefill = job.prefill
        if job.prompt_logprobs:
            job.on_event(_prompt_logprobs(prefill.all_logits(), job.prompt, job.logprobs or 0))
        if job.max_tokens <= 0:
            self._finish(job, "length")
            return
        logits = prefill.last_logits()[None]
        row = self.batch.join(prefill)
        job.prefill = None
        assert row == len(self.running)
        self.running.append(job)
        self._emit_tokens([job], logits)

    def _emit_tokens(self, jobs: list[Job], logits: torch.Tensor) -> None:
        """Sample each job's next token from its row of `logits`, tell it, and retire the finished."""
        tokens, processed = sample_rows(jobs, logits)
        # what the next decode step feeds, when these are exactly its rows and none leaves (else rebuilt then)
        self.next_tokens = tokens if jobs is self.running else None
        logprobs = chosen = None
        if any(j.logprobs is not None for j in jobs):
            logprobs = row_logprobs(logits, processed, self.logprobs_mode)
            chosen = logprobs.gather(1, tokens[:, None])[:, 0].tolist()  # one read-back for every row
        now = time.perf_counter()
        self._record_timing(jobs, now)
        ended = []
        for i, (job, token) in enumerate(zip(jobs, tokens.tolist(), strict=True)):
            job.generated += 1
            job.pending = token
            stop = token in job.stop_ids
            if job.logprobs is None:
                job.on_event(Token(token, stop=stop))
            else:
                job.on_event(Token(token, chosen[i], _top(logprobs[i], job.logprobs), stop))
            if stop or job.generated >= job.max_tokens:
                ended.append((job, "stop" if stop else "length"))
        for job, reason in ended:
            self._retire(job, reason)

    def _record_timing(self, jobs: list[Job], now: float) -> None:
        """Each job's time to first token or since its last token, under one lock for the step."""
        metrics = self.metrics
        with metrics.lock:
            for job in jobs:
                if job.generated == 0:
                    metrics.time_to_first_token.observe(now - job.arrived)
                else:
                    metrics.time_per_output_token.observe(now - job.last_token_at)
                job.last_token_at = now
            metrics.generation_tokens += len(jobs)

    def _retire(self, job: Job, reason: str) -> None:
        """Free the job's row (the last row moves into it) and send its ending."""
        row = self.running.index(job)
        self.batch.leave(row)
        last = self.running.pop()
        if row < len(self.running):
            self.running[row] = last
        self._finish(job, reason)

    def _finish(self, job: Job, reason: str) -> None:
        with self.metrics.lock:
            self.metrics.finished[reason] += 1
        job.on_event(Finished(reason))

    def _drop_cancelled(self) -> None:
        if not self.cancels:
            return
        with self.wake:
            self.cancels = 0
            for job in [j for j in self.waiting if j.cancel_reason]:
                self.waiting.remove(job)
                self._finish(job, job.cancel_reason)
        for job in [j for j in self.prefilling if j.cancel_reason]:
            self.prefilling.remove(job)
            self._finish(job, job.cancel_reason)
        for job in [j for j in self.running if j.cancel_reason]:
            self._retire(job, job.cancel_reason)

    def _fail_everyone(self, message: str) -> None:
        for job in [*self.prefilling, *self.running]:
            with self.metrics.lock:
                self.metrics.finished["failed"] += 1
            job.on_event(Failed(message))
        self.prefilling, self.running = [], []
        self.batch = make_batch(self.model, self.max_slots)
        self._count_queues()

    def _count_queues(self) -> None:
        running, waiting = len(self.running) + len(self.prefilling), len(self.waiting)
        metrics = self.metrics
        if (metrics.running, metrics.waiting) != (running, waiting):  # most steps change neither
            with metrics.lock:
                metrics.running, metrics.waiting = running, waiting


def fit_to_window(job: Job, window: int) -> None:
    """Refuse a prompt the window cannot hold (ValueError), and cut `max_tokens` to the room it leaves."""
    if not 1 <= len(job.prompt) <= window:
        raise ValueError(f"a prompt has 1 to {window} tokens, got {len(job.prompt)}")
    job.max_tokens = min(job.max_tokens, window - len(job.prompt))


def _top(logprobs: torch.Tensor, k: int) -> tuple[tuple[int, float], ...]:
    if k <= 0:
        return ()
    values, ids = torch.topk(logprobs, min(k, logprobs.shape[-1]))
    return tuple(zip(ids.tolist(), values.tolist(), strict=True))


def _prompt_logprobs(logits: torch.Tensor, prompt: list[int], k: int) -> PromptLogprobs:
    """Position i's logits predict prompt[i + 1]: the log-probs of prompt[1:] and the top-k at each."""
    logprobs = torch.log_softmax(logits[:-1], dim=-1)
    targets = torch.tensor(prompt[1:], dtype=torch.long, device=logits.device)
    chosen = logprobs.gather(1, targets[:, None])[:, 0].tolist() if len(prompt) > 1 else []
    return PromptLogprobs(tuple(chosen), tuple(_top(row, k) for row in logprobs))
