"""Continuous batching gives every request exactly what it would get alone, whoever joins or leaves.

The reference is the plainest greedy loop there is, written here: the whole sequence through
`model(idx)` for every token, no cache, no batch. The scheduler is stepped by hand, so requests join
mid-stream at chosen steps, rows leave and move, and the shared cache shifts, all deterministically.
"""

from __future__ import annotations

import random

import pytest
import torch

from model_variants import all_configs
from tinylm.inference.sampling import GREEDY, SamplingParams
from tinylm.models.factory import build_model
from tinylm.serve.events import Finished, Token
from tinylm.serve.scheduler import Job, Scheduler

pytestmark = pytest.mark.usefixtures("one_thread")
CONFIGS = all_configs()


def _model(name: str) -> torch.nn.Module:
    torch.manual_seed(0)
    return build_model(CONFIGS[name].replace(init_std=0.4)).eval()


def greedy_alone(model: torch.nn.Module, prompt: list[int], max_tokens: int, stops: frozenset[int]) -> list[int]:
    ids, out = list(prompt), []
    with torch.inference_mode():
        for _ in range(min(max_tokens, model.config.context_length - len(prompt))):
            token = int(model(torch.tensor([ids]))[0][0, -1].argmax())
            if token in stops:
                break
            out.append(token)
            ids.append(token)
    return out


class Collector:
    """A job's events, as the scheduler hands them over."""

    def __init__(self) -> None:
        self.tokens: list[int] = []
        self.stop_token: int | None = None  # sent (for usage and log-probs) but not part of the text
        self.ending: str | None = None

    def __call__(self, event: object) -> None:
        if isinstance(event, Token) and event.stop:
            self.stop_token = event.id
        elif isinstance(event, Token):
            self.tokens.append(event.id)
        elif isinstance(event, Finished):
            self.ending = event.reason


def make_job(prompt: list[int], max_tokens: int, sampling: SamplingParams = GREEDY, seed: int | None = None,
             stops: frozenset[int] = frozenset()) -> tuple[Job, Collector]:
    collector = Collector()
    return Job(prompt, max_tokens, sampling, collector, seed=seed, stop_ids=stops), collector


def drive(scheduler: Scheduler, arrivals: dict[int, list[Job]], max_steps: int = 2000) -> int:
    """Step the scheduler by hand, submitting arrivals[s] before step s, until nothing is left; the steps taken."""
    for step in range(max_steps):
        for job in arrivals.get(step, []):
            scheduler.submit(job)
        scheduler.admit()
        if not (scheduler.waiting or scheduler.prefilling or scheduler.running) and step > max(arrivals):
            return step
        with torch.inference_mode():
            scheduler.step()
    raise AssertionError("the scheduler did not finish within max_steps")


def random_prompts(n: int, vocab: int, longest: int, seed: int = 1) -> list[list[int]]:
    rng = random.Random(seed)
    return [[rng.randrange(vocab) for _ in range(rng.randint(1, longest))] for _ in range(n)]


@pytest.mark.parametrize("name", sorted(CONFIGS))
def test_sixteen_staggered_requests_each_get_their_greedy_tokens_alone(name: str) -> None:
    """16 requests of 1-20 prompt tokens join at different steps into 6 slots (so some wait), generate up to
    the 32-token window (rows leave, the cache shifts) and stop at a stop token: each equals the solo loop."""
    model = _model(name)
    prompts = random_prompts(16, model.config.vocab_size, 20)
    stops = frozenset({greedy_alone(model, prompts[0], 6, frozenset())[5]})  # one the model does produce
    limits = [random.Random(i).randint(1, 40) for i in range(16)]
    jobs = [make_job(p, m, stops=stops) for p, m in zip(prompts, limits)]
    arrivals: dict[int, list[Job]] = {}
    for i, (job, _) in enumerate(jobs):
        arrivals.setdefault((i * 3) % 17, []).append(job)
    drive(Scheduler(model, max_slots=6, prefill_budget=8), arrivals)
    for (_, got), prompt, limit in zip(jobs, prompts, limits):
        expected = greedy_alone(model, prompt, limit, stops)
        assert got.tokens == expected
        room = model.config.context_length - len(prompt)
        assert got.ending == ("length" if len(expected) == min(limit, room) else "stop")
    assert jobs[0][1].ending == "stop" and jobs[0][1].stop_token in stops


def test_prefill_is_chunked_between_decode_steps() -> None:
    """A 30-token prompt with a budget of 8 tokens a step prefills over 4 steps; the running stream gets a token
    at every one of them instead of waiting for the whole prompt."""
    model = _model("gqa")
    running, seen = make_job([1, 2, 3], 20)
    long_job, long_seen = make_job(list(range(30)), 2)
    scheduler = Scheduler(model, max_slots=4, prefill_budget=8)
    scheduler.submit(running)
    scheduler.admit()
    with torch.inference_mode():
        scheduler.step()  # the short prompt is prefilled and decoding
        scheduler.submit(long_job)
        scheduler.admit()
        counts = []
        for _ in range(4):
            scheduler.step()
            counts.append(len(seen.tokens))
    assert counts == [3, 4, 5, 6]  # one new token per step while the long prompt goes in 8 tokens at a time
    assert long_seen.tokens[:1] == greedy_alone(model, list(range(30)), 1, frozenset())


def test_a_cancelled_request_leaves_its_slot_at_the_next_step() -> None:
    model = _model("gqa")
    scheduler = Scheduler(model, max_slots=2)
    (a, a_seen), (b, b_seen), (c, c_seen) = (make_job([1, 2], 25), make_job([3], 25), make_job([4, 5, 6], 5))
    for job in (a, b, c):
        scheduler.submit(job)
    scheduler.admit()
    with torch.inference_mode():
        scheduler.step()
        assert scheduler.batch.rows == 2 and len(scheduler.waiting) == 1  # c waits for a slot
        scheduler.cancel(a)
        scheduler.step()
        scheduler.admit()
    assert a_seen.ending == "cancelled" and scheduler.batch.rows == 1 and [j for j in scheduler.prefilling] == [c]
    drive(scheduler, {0: []})
    assert b_seen.tokens == greedy_alone(model, [3], 25, frozenset())  # b moved rows and never noticed
    assert c_seen.tokens == greedy_alone(model, [4, 5, 6], 5, frozenset())
    assert scheduler.metrics.finished["cancelled"] == 1 and scheduler.metrics.running == 0


def test_seeded_sampling_does_not_depend_on_the_neighbours() -> None:
    """Each request draws from its own generator: the same seed gives the same tokens alone or in a crowd."""
    model = _model("gqa")
    sampling = SamplingParams(temperature=1.0, top_k=20)
    alone, alone_seen = make_job([5, 6, 7], 20, sampling, seed=42)
    drive(Scheduler(model), {0: [alone]})
    crowd = [make_job([i + 1] * (i + 1), 20, sampling, seed=i) for i in range(8)]
    again, again_seen = make_job([5, 6, 7], 20, sampling, seed=42)
    drive(Scheduler(model), {0: [job for job, _ in crowd[:4]], 2: [again, *(job for job, _ in crowd[4:])]})
    assert again_seen.tokens == alone_seen.tokens and len(alone_seen.tokens) == 20
    other, other_seen = make_job([5, 6, 7], 20, sampling, seed=43)
    drive(Scheduler(model), {0: [other]})
    assert other_seen.tokens != alone_seen.tokens


def test_sixteen_concurrent_http_clients_get_what_each_gets_alone(tmp_path) -> None:
    """Through the server: 16 clients at once at temperature 0 (joining a batch that is already running)
    receive the very text each received when it was the only request."""
    from concurrent.futures import ThreadPoolExecutor

    import openai

    from serve_support import make_checkpoint, serving

    widest = []

    def record_batch_width(scheduler) -> None:
        step = scheduler.step

        def step_and_record() -> None:
            step()
            widest.append(scheduler.batch.rows)

        scheduler.step = step_and_record

    prompts = [f"def f{i}(x):\n    return x * {i}" + " + 1" * (i % 5) for i in range(16)]
    with serving(make_checkpoint(tmp_path), wrap=record_batch_width) as (url, _, _):
        client = openai.OpenAI(base_url=url + "/v1", api_key="unused", max_retries=0, timeout=120)

        def complete(prompt: str, max_tokens: int) -> str:
            return client.completions.create(model="micro", prompt=prompt, max_tokens=max_tokens,
                                             temperature=0).choices[0].text

        alone = [complete(p, 30) for p in prompts]
        widest.clear()
        with ThreadPoolExecutor(16) as pool:
            together = list(pool.map(complete, prompts, [30] * 16))
    assert together == alone
    assert max(widest) > 4  # they really ran side by side


def test_each_model_kind_is_batched_by_the_fastest_exact_path() -> None:
    """The staggered test above runs each kind: the lean FastDecoder batch where it computes the model exactly,
    the model's own cached path for multi-head latent attention, recomputation for the classic model."""
    from tinylm.inference.fast_decode import supports_fast_decode
    from tinylm.serve.slots import CachedBatch, FastBatch, RecomputeBatch, make_batch

    kinds = {}
    for name in sorted(CONFIGS):
        model = _model(name)
        batch = make_batch(model, 2)
        expected = FastBatch if supports_fast_decode(model) else (
            CachedBatch if hasattr(model, "new_cache") else RecomputeBatch)
        assert type(batch) is expected, name
        kinds[type(batch)] = name
    assert set(kinds) == {FastBatch, CachedBatch, RecomputeBatch}, kinds
