"""What an RL trainer needs from `tinylm serve`: a seeded request draws exactly the in-process rollout rows,
tokens come back as ids, stops by id, log-probs raw or as sampled, and new weights through /admin/reload
(loopback or a token only; another model is refused; running requests finish on the old weights)."""

from __future__ import annotations

import threading
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest
import torch
from fastapi.testclient import TestClient

from serve_support import make_checkpoint, serving
from test_serve_batching import make_job
from tinylm.checkpoint import load_model
from tinylm.inference.sampling import SamplingParams
from tinylm.serve.app import create_app
from tinylm.serve.metrics import metric_value
from tinylm.serve.scheduler import Scheduler
from tinylm.serve.served_model import ServedModel
from tinylm.stages.rl.rollout import row_seeds, sample_rollouts

pytestmark = pytest.mark.usefixtures("one_thread")
PROMPT = [5, 17, 33, 2, 9]


@pytest.fixture(scope="module")
def checkpoints(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    roots = {name: tmp_path_factory.mktemp(name) for name in ("first", "second", "longer")}
    return {"first": make_checkpoint(roots["first"]), "second": make_checkpoint(roots["second"], seed=1),
            "longer": make_checkpoint(roots["longer"], context_length=128)}


@pytest.fixture()
def server(checkpoints: dict[str, Path]) -> Iterator[tuple[str, ServedModel, object]]:
    with serving(checkpoints["first"]) as running:
        yield running


def completion(url: str, **fields: object) -> dict:
    reply = httpx.post(url + "/v1/completions", json={"model": "micro", "prompt": PROMPT, **fields}, timeout=60)
    assert reply.status_code == 200, reply.text
    return reply.json()


def prompt_tokens(url: str) -> float:
    return metric_value(httpx.get(url + "/metrics").text, "tinylm_prompt_tokens_total")


def ids_of(choice: dict) -> list[int]:
    return [int(name.removeprefix("token_id:")) for name in choice["logprobs"]["tokens"]]


def test_a_seeded_request_draws_the_in_process_rollout_rows(server) -> None:
    """n = G with seed S * 1_000_003: choice g is row g of `sample_rollouts` for a prompt seeded S, token for token,
    with the same log-probs, for every stop set and temperature. The G choices share one prefill of the prompt."""
    url, served, _ = server
    stops = [7, 11]
    for temperature, seed in ((1.0, 3), (0.7, 10**13 + 7)):  # the second: S * 1_000_003 wraps past 2**63
        sampling = SamplingParams(temperature=temperature)
        rows = sample_rollouts(served.model, [PROMPT], 4, 12, sampling, [seed], stops, pad_id=0)
        computed = prompt_tokens(url)
        reply = completion(url, n=4, max_tokens=12, temperature=temperature, seed=seed * 1_000_003 % 2**63,
                           logprobs=0, return_tokens_as_token_ids=True, stop_token_ids=stops, ignore_eos=True)
        assert prompt_tokens(url) - computed == len(PROMPT)  # once for the 4 choices
        assert reply["usage"]["prompt_tokens"] == len(PROMPT)
        assert [ids_of(c) for c in reply["choices"]] == rows.responses
        for g, choice in enumerate(reply["choices"]):
            n = len(rows.responses[g])
            assert choice["finish_reason"] == ("stop" if bool(rows.stopped[g]) else "length")
            got = torch.tensor(choice["logprobs"]["token_logprobs"])
            want = rows.logprobs[g][rows.response_mask[g] > 0]
            if temperature == 1.0:  # raw log-probs are the tempered ones only at T = 1
                assert torch.allclose(got, want, atol=1e-5), (got, want)
            assert len(got) == n
    assert row_seeds([3], 2) == [3 * 1_000_003, 3 * 1_000_003 + 1]  # the rule the trainer's seed relies on


def test_processed_log_probs_are_of_the_distribution_each_token_was_drawn_from(checkpoints) -> None:
    model, tokenizer, meta = load_model(checkpoints["first"])
    for mode, scale in (("raw", 1.0), ("processed", 0.5)):
        served = ServedModel.build("micro", model, tokenizer, meta=meta, logprobs_mode=mode)
        job, _ = make_job(PROMPT, 6, SamplingParams(temperature=0.5), seed=11)
        events: list = []
        job.on_event, job.logprobs = events.append, 0
        served.scheduler.submit(job)
        scheduler = served.scheduler
        while scheduler.waiting or scheduler.prefilling or scheduler.running:
            scheduler.admit()
            with torch.inference_mode():
                scheduler.step()
        tokens = [e for e in events if hasattr(e, "logprob")]
        ids = PROMPT + [t.id for t in tokens]
        with torch.inference_mode():
            logits = model(torch.tensor([ids]))[0][0, len(PROMPT) - 1:-1].float()
        want = torch.log_softmax(logits / scale, -1).gather(1, torch.tensor([[t.id] for t in tokens]))[:, 0]
        assert torch.allclose(torch.tensor([t.logprob for t in tokens]), want, atol=1e-5), mode
    with pytest.raises(ValueError, match="logprobs_mode"):
        Scheduler(model, logprobs_mode="logits")


def test_stops_by_id_and_ignore_eos(server) -> None:
    url, served, _ = server
    free = completion(url, max_tokens=20, temperature=0, logprobs=0, return_tokens_as_token_ids=True,
                      ignore_eos=True)["choices"][0]
    ids = ids_of(free)
    assert len(ids) == 20 and free["finish_reason"] == "length"  # nothing stops it: not even end-of-text
    stop = ids[4]
    cut = completion(url, max_tokens=20, temperature=0, logprobs=0, return_tokens_as_token_ids=True,
                     stop_token_ids=[stop], ignore_eos=True)["choices"][0]
    assert ids_of(cut) == ids[: ids.index(stop) + 1] and cut["finish_reason"] == "stop"  # the stop id is counted
    bad = httpx.post(url + "/v1/completions", json={"model": "micro", "prompt": PROMPT, "stop_token_ids": [10**6]})
    assert bad.status_code == 400 and bad.json()["error"]["param"] == "stop_token_ids"
    chat = httpx.post(url + "/v1/chat/completions", json={
        "model": "micro", "messages": [{"role": "user", "content": "hi"}], "max_tokens": 3, "temperature": 0,
        "logprobs": True, "top_logprobs": 2, "return_tokens_as_token_ids": True}, timeout=60).json()
    entries = chat["choices"][0]["logprobs"]["content"]
    assert entries and all(e["token"].startswith("token_id:") for e in entries)
    assert all(t["token"].startswith("token_id:") for e in entries for t in e["top_logprobs"])


def greedy_ids(url: str) -> list[int]:
    return ids_of(completion(url, max_tokens=10, temperature=0, logprobs=0, return_tokens_as_token_ids=True,
                             ignore_eos=True)["choices"][0])


def test_reload_serves_the_new_weights_and_refuses_another_model(server, checkpoints, tmp_path: Path) -> None:
    url, served, _ = server
    before = greedy_ids(url)
    reply = httpx.post(url + "/admin/reload", json={"checkpoint": str(checkpoints["second"])}, timeout=60)
    assert reply.status_code == 200 and reply.json()["dtype"] == "float32"
    after = greedy_ids(url)
    with serving(checkpoints["second"]) as (second_url, _, _):
        assert after == greedy_ids(second_url) != before  # exactly what a server started on it decodes
    longer = httpx.post(url + "/admin/reload", json={"checkpoint": str(checkpoints["longer"])}, timeout=60)
    assert longer.status_code == 409
    assert "context_length 128, the served model's 64" in longer.json()["error"]["message"]
    missing = httpx.post(url + "/admin/reload", json={"checkpoint": str(tmp_path / "nothing")}, timeout=60)
    assert missing.status_code == 400 and missing.json()["error"]["param"] == "checkpoint"
    assert greedy_ids(url) == after  # refused reloads changed nothing, and the server still serves


def test_reload_is_for_loopback_callers_or_the_admin_token(checkpoints) -> None:
    def served() -> ServedModel:
        return ServedModel.build("micro", *load_model(checkpoints["first"])[:2])

    body = {"checkpoint": str(checkpoints["second"])}
    with TestClient(create_app(served(), admin_token="s3cret")) as remote:  # TestClient's caller is "testclient"
        refused = remote.post("/admin/reload", json=body)
        assert refused.status_code == 403 and refused.json()["error"]["type"] == "permission_error"
        assert remote.post("/admin/reload", json=body, headers={"Authorization": "Bearer wrong"}).status_code == 403
        assert remote.post("/admin/reload", json=body, headers={"Authorization": "Bearer s3cret"}).status_code == 200
    with TestClient(create_app(served())) as remote:  # without a token, nobody off the machine
        assert remote.post("/admin/reload", json=body, headers={"Authorization": "Bearer s3cret"}).status_code == 403


def test_a_swap_waits_for_the_running_requests_which_finish_on_the_old_weights(checkpoints) -> None:
    old, _, _ = load_model(checkpoints["first"])
    new, _, _ = load_model(checkpoints["second"])
    scheduler = Scheduler(old, max_slots=4)
    running, running_seen = make_job(PROMPT, 12)
    scheduler.submit(running)
    scheduler.admit()
    with torch.inference_mode():
        scheduler.step()  # prefilled: it is decoding now
    waiter = threading.Thread(target=scheduler.swap_model, args=(new,))
    waiter.start()
    while scheduler.swap is None:
        waiter.join(0.01)
    late, late_seen = make_job(PROMPT, 12)
    scheduler.submit(late)
    while scheduler.running:  # what the loop does: no swap and no admission while a request runs
        with scheduler.wake:
            scheduler._swap_when_idle()
        scheduler.admit()
        assert scheduler.model is old and list(scheduler.waiting) == [late]
        with torch.inference_mode():
            scheduler.step()
    with scheduler.wake:
        scheduler._swap_when_idle()
    waiter.join(10)
    assert not waiter.is_alive() and scheduler.model is new and scheduler.swap is None
    while scheduler.waiting or scheduler.prefilling or scheduler.running:
        scheduler.admit()
        with torch.inference_mode():
            scheduler.step()

    def greedy(model: torch.nn.Module) -> list[int]:
        ids = list(PROMPT)
        with torch.inference_mode():
            for _ in range(12):
                ids.append(int(model(torch.tensor([ids]))[0][0, -1].argmax()))
        return ids[len(PROMPT):]

    assert running_seen.tokens == greedy(old) and late_seen.tokens == greedy(new) != greedy(old)
