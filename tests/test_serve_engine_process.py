"""`tinylm serve` with the model in a process of its own (the default): it serves what the in-process engine
decodes, its metrics and reloads cross the pipe, SIGTERM ends both processes, and an engine process that
dies fails its running request and every later one with one line (503), while HTTP keeps answering."""

from __future__ import annotations

import json
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest

from serve_support import free_port, make_checkpoint
from tinylm.checkpoint import load_model
from tinylm.inference.engine import Engine
from tinylm.inference.sampling import GREEDY

pytestmark = pytest.mark.usefixtures("one_thread")
PROMPT = [5, 17, 33, 2, 9]


def engine_child(server: subprocess.Popen) -> int:
    """The pid of the server's engine process (not multiprocessing's resource tracker)."""
    for stat in Path("/proc").glob("[0-9]*/stat"):
        try:
            parent = stat.read_text().rsplit(")", 1)[1].split()[1]
            command = (stat.parent / "cmdline").read_bytes()
        except OSError:
            continue
        if parent == str(server.pid) and b"spawn_main" in command and b"resource_tracker" not in command:
            return int(stat.parent.name)
    raise AssertionError("the server has no engine process")


def alive(pid: int) -> bool:
    try:
        return "zombie" not in Path(f"/proc/{pid}/status").read_text().lower()
    except OSError:
        return False


@pytest.fixture()
def started(tmp_path: Path) -> Iterator[tuple[str, subprocess.Popen, Path]]:
    run_dir = make_checkpoint(tmp_path, context_length=512)
    port = free_port()
    server = subprocess.Popen([sys.executable, "-m", "tinylm", "serve", "--checkpoint", str(run_dir), "--port",
                               str(port), "--threads", "1", "--dtype", "fp32"], stderr=subprocess.PIPE, text=True)
    banner = server.stderr.readline()
    assert "the model in a process of its own" in banner, banner
    try:
        yield f"http://127.0.0.1:{port}", server, run_dir
    finally:
        server.kill()
        server.wait(30)


def greedy(url: str, n: int = 12) -> list[int]:
    reply = httpx.post(url + "/v1/completions", json={"model": "micro-modern", "prompt": PROMPT, "max_tokens": n,
                                                      "temperature": 0, "logprobs": 0, "ignore_eos": True,
                                                      "return_tokens_as_token_ids": True}, timeout=60)
    assert reply.status_code == 200, reply.text
    return [int(t.removeprefix("token_id:")) for t in reply.json()["choices"][0]["logprobs"]["tokens"]]


def test_the_engine_process_serves_the_engines_tokens_reloads_and_stops_with_the_server(started, tmp_path) -> None:
    url, server, run_dir = started
    model = load_model(run_dir)[0]
    assert greedy(url) == Engine(model).generate([PROMPT], 12, GREEDY)[0]
    metrics = httpx.get(url + "/metrics").text  # rendered by the engine process
    assert "\ntinylm_generation_tokens_total 12\n" in metrics
    other = make_checkpoint(tmp_path / "other", context_length=512, seed=1)
    reply = httpx.post(url + "/admin/reload", json={"checkpoint": str(other)}, timeout=60)
    assert reply.status_code == 200 and reply.json()["dtype"] == "float32"
    assert greedy(url) == Engine(load_model(other)[0]).generate([PROMPT], 12, GREEDY)[0]
    shorter = make_checkpoint(tmp_path / "shorter", context_length=64)
    refused = httpx.post(url + "/admin/reload", json={"checkpoint": str(shorter)}, timeout=60)
    assert refused.status_code == 409 and "context_length 64, the served model's 512" in refused.text
    child = engine_child(server)
    server.send_signal(signal.SIGTERM)
    assert server.wait(60) == 0
    deadline = time.monotonic() + 10
    while alive(child) and time.monotonic() < deadline:
        time.sleep(0.05)
    assert not alive(child)


def test_an_engine_process_that_dies_fails_its_stream_and_later_requests_in_one_line(started) -> None:
    url, server, _ = started
    body = {"model": "micro-modern", "prompt": PROMPT, "max_tokens": 500, "n": 16, "temperature": 1.0,
            "ignore_eos": True, "stream": True}
    with httpx.stream("POST", url + "/v1/completions", json=body, timeout=60) as stream:
        lines = stream.iter_lines()
        assert next(lines).startswith("data: {")  # generating
        engine_child(server)  # (found while it runs)
        subprocess.run(["kill", "-9", str(engine_child(server))], check=True)
        rest = [line for line in lines if line.startswith("data: ")]
    errors = [json.loads(line[6:])["error"] for line in rest if '"error"' in line]
    assert rest[-1] == "data: [DONE]" and len(errors) == 1
    assert errors[0]["message"] == "generation failed: the engine process has exited (exit code -9)"
    later = httpx.post(url + "/v1/completions", json={"model": "micro-modern", "prompt": PROMPT}, timeout=60)
    assert later.status_code == 503 and "the engine process has exited" in later.json()["error"]["message"]
    health = httpx.get(url + "/health")
    assert health.status_code == 503 and health.json()["status"] == "error"
    reload = httpx.post(url + "/admin/reload", json={"checkpoint": "anything"}, timeout=60)
    assert reload.status_code == 503 and "the engine process has exited" in reload.json()["error"]["message"]
    assert httpx.get(url + "/metrics").status_code == 503
    assert httpx.get(url + "/v1/models").status_code == 200  # the HTTP side still answers


class _CountingPipe:
    """The server side of the engine pipe, keeping every message that came back."""

    def __init__(self, conn: object) -> None:
        self.conn, self.messages = conn, []

    def recv(self) -> object:
        message = self.conn.recv()
        self.messages.append(message)
        return message

    def __getattr__(self, name: str) -> object:
        return getattr(self.conn, name)


def test_a_streams_tokens_leave_every_interval_but_first_tokens_and_endings_never_wait(tmp_path: Path) -> None:
    """With a 60 s interval, job A's first token leaves at once, with its step; job B, submitted while A runs, gets its
    first token at once too (carrying A's waiting tokens with it); each ending leaves with its step. Nothing
    waits the 60 s, and the message count is what the rule gives, not one per step."""
    from tinylm.serve.engine_process import EngineClient, EngineOptions
    from tinylm.serve.events import Finished, Token
    from tinylm.serve.scheduler import Job

    run_dir = make_checkpoint(tmp_path, context_length=512)
    class CountingClient(EngineClient):
        def _read(self) -> None:  # the reader thread: from its first message on, through a counting pipe
            self.conn = _CountingPipe(self.conn)
            super()._read()

    client = CountingClient(EngineOptions(str(run_dir), threads=1, stream_interval=60.0),
                            load_model(run_dir)[0].config)
    client.start()
    events: dict[str, list[object]] = {"a": [], "b": []}
    first_of_a, done = threading.Event(), {name: threading.Event() for name in events}

    def collect(name: str):
        def on_event(event: object) -> None:
            events[name].append(event)
            if name == "a":
                first_of_a.set()
            if isinstance(event, Finished):
                done[name].set()
        return on_event

    start = time.monotonic()
    try:
        client.submit(Job(PROMPT, 500, GREEDY, collect("a")))
        assert first_of_a.wait(30)
        client.submit(Job(PROMPT[:3], 5, GREEDY, collect("b")))
        assert done["b"].wait(30) and done["a"].wait(30)
    finally:
        client.stop()
    assert time.monotonic() - start < 50  # no message waited out the interval
    assert [type(e) for e in events["a"]] == [Token] * 500 + [Finished]
    assert [type(e) for e in events["b"]] == [Token] * 5 + [Finished]
    sent = [[(number, type(event)) for number, event in m[1]] for m in client.conn.messages if m[0] == "events"]
    assert sent[0] == [(0, Token)] * 2  # A's first token at once (with the token its step went on to decode)
    b_first = next(i for i, m in enumerate(sent) if (1, Token) in m)
    # B's first token took A's waiting ones along, ahead of it: none if B came before A's next step (a busy machine)
    waiting_of_a = next(i for i, event in enumerate(sent[b_first]) if event[0] == 1)
    assert sent[b_first][:waiting_of_a] == [(0, Token)] * waiting_of_a and sent[b_first][waiting_of_a] == (1, Token)
    assert sent[b_first + 1][-1] == (1, Finished)  # B's later tokens waited only for its ending
    assert sent[-1][-1] == (0, Finished) and len(sent) == b_first + 3  # then A's rest, with A's ending


def test_serve_passes_stream_interval_ms_to_the_engine_and_refuses_a_bad_one(tmp_path: Path) -> None:
    """--stream-interval-ms 1000: a 400-token stream (well under a second of decoding) arrives in two chunks of
    text, its first step's tokens and then the rest with its ending (give or take a split delivery; the default
    8 ms gives one every 8 ms); a negative interval is one line and exit 2, as argparse refuses."""
    run_dir = make_checkpoint(tmp_path, context_length=512)
    port = free_port()
    server = subprocess.Popen([sys.executable, "-m", "tinylm", "serve", "--checkpoint", str(run_dir), "--port",
                               str(port), "--threads", "1", "--stream-interval-ms", "1000"], stderr=subprocess.PIPE,
                              text=True)
    try:
        assert "serving" in server.stderr.readline()
        body = {"model": "micro-modern", "prompt": PROMPT, "max_tokens": 400, "temperature": 0, "ignore_eos": True,
                "stream": True}
        with httpx.stream("POST", f"http://127.0.0.1:{port}/v1/completions", json=body, timeout=60) as stream:
            chunks = [json.loads(line[6:]) for line in stream.iter_lines() if line.startswith("data: {")]
    finally:
        server.kill()
        server.wait(30)
    # (a message's events can reach the HTTP side's loop in two deliveries, so a few chunks, not one per token)
    assert 2 <= len(chunks) <= 4 and chunks[-1]["choices"][0]["finish_reason"] == "length"
    assert sum(len(c["choices"][0]["text"]) for c in chunks) > 0
    refused = subprocess.run([sys.executable, "-m", "tinylm", "serve", "--checkpoint", str(run_dir),
                              "--stream-interval-ms", "-1"], capture_output=True, text=True)
    assert refused.returncode == 2 and "--stream-interval-ms: must be a finite number in [0, 1000]" in refused.stderr
