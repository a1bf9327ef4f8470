"""`tinylm rl --rollout-url`: rollouts sampled by a `tinylm serve` subprocess equal the in-process ones for a
fixed seed, the weights reach the server every round, the importance ratio of the server's log-probs is 1,
and a server that disappears fails the step with one line, after which the run resumes exactly."""

from __future__ import annotations

import http.server
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest
import torch

from serve_support import free_port
from test_ddp import torchrun
from test_rl import final_weights, rl_args
from test_sft import base_run
from test_train_support import rows
from tinylm.checkpoint import list_checkpoints
from tinylm.cli.main import main

pytestmark = pytest.mark.usefixtures("one_thread")

SAME = ("reward", "accuracy", "response_length", "truncated_frac", "informative_frac")  # what the rollouts decide
STEPS = ["--max-steps", "4", "--lr", "0.05"]  # a large step: the policy moves, so stale weights would show


@pytest.fixture(scope="module")
def server() -> Iterator[str]:
    """A `tinylm serve` subprocess on the RL base, decoding in float32 like the trainer."""
    port = free_port()
    process = subprocess.Popen([sys.executable, "-m", "tinylm", "serve", "--checkpoint", str(base_run()), "--port",
                                str(port), "--dtype", "fp32", "--threads", "1"], stderr=subprocess.PIPE, text=True)
    url = f"http://127.0.0.1:{port}"
    deadline = time.monotonic() + 60
    while True:
        try:
            httpx.get(f"{url}/health", timeout=1)
            break
        except httpx.HTTPError:
            if process.poll() is not None or time.monotonic() > deadline:
                raise RuntimeError(f"tinylm serve did not start: {process.communicate()[1][-500:]}") from None
            time.sleep(0.1)
    try:
        yield url
    finally:
        process.terminate()
        process.wait(30)


class FlakyProxy:
    """A loopback proxy to the server that hangs up on every completion request after the first `healthy` ones
    (the server "disappears"), until `heal()`."""

    def __init__(self, target: str, healthy: int) -> None:
        self.target, self.healthy, self.completions = target, healthy, 0
        proxy = self

        class Forward(http.server.BaseHTTPRequestHandler):
            def log_message(self, *args: object) -> None:
                pass

            def _forward(self) -> None:
                body = self.rfile.read(int(self.headers.get("Content-Length") or 0))
                if self.path == "/v1/completions":
                    proxy.completions += 1
                    if proxy.completions > proxy.healthy:
                        self.close_connection = True  # no reply at all: the client sees the server vanish
                        return
                reply = httpx.request(self.command, proxy.target + self.path, content=body, timeout=60,
                                      headers={"Content-Type": "application/json"})
                self.send_response(reply.status_code)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(reply.content)))
                self.end_headers()
                self.wfile.write(reply.content)

            do_GET = do_POST = _forward

        self.http = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Forward)
        self.url = f"http://127.0.0.1:{self.http.server_address[1]}"
        threading.Thread(target=self.http.serve_forever, daemon=True).start()

    def heal(self) -> None:
        self.healthy = 10**9

    def close(self) -> None:
        self.http.shutdown()
        self.http.server_close()


def logged(run: Path) -> list[dict]:
    return [r for r in rows(run) if "loss" in r]


@pytest.fixture(scope="module")
def runs(server: str, tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    """The same RL run three ways: in-process, from the server, and from a server never told the new weights."""
    root = tmp_path_factory.mktemp("rollout-server")
    assert main(rl_args(root / "local", "grpo", *STEPS)) == 0
    # first, while the server still holds the base: every synced run leaves its last weights there
    assert main(rl_args(root / "stale", "grpo", *STEPS, "--rollout-url", server, "--rollout-sync", "none")) == 0
    assert main(rl_args(root / "served", "grpo", *STEPS, "--rollout-url", server)) == 0
    return {name: root / name for name in ("local", "served", "stale")}


def test_rollouts_from_the_server_equal_in_process_ones_and_the_ratio_is_one(runs: dict[str, Path]) -> None:
    local, served = logged(runs["local"]), logged(runs["served"])
    assert len(local) == len(served) == 4
    for a, b in zip(local, served, strict=True):
        assert {k: a[k] for k in SAME} == {k: b[k] for k in SAME}  # the same tokens, hence the same rewards
        assert b["sampler_gap_max"] < 1e-5 and b["sampler_gap"] < 1e-6  # |log pi_old - log pi_sampler|
        assert b["tis_weight"] == pytest.approx(1.0, abs=1e-5) and b["tis_capped_frac"] == 0
        assert b["loss"] == pytest.approx(a["loss"], rel=1e-4, abs=1e-6)
    assert len({r["reward"] for r in local}) > 1  # the policy moved: later rounds sampled new weights
    # Adam divides by the gradient's own size, so the rounding of near-zero gradients (the in-process old log-probs
    # are the sampler's, the served run's a recompute) reaches the weights at ~1e-4, against steps of lr = 0.05
    trained, remote = final_weights(runs["local"]), final_weights(runs["served"])
    assert all(torch.allclose(trained[k], remote[k], atol=1e-3) for k in trained)
    published = list_checkpoints(runs["served"] / "rollout-weights")
    assert [p.name for p in published] == ["step_00000003"]  # round 3's weights, the newest only


def test_a_server_never_synced_samples_stale_weights_and_the_gap_shows_it(runs: dict[str, Path]) -> None:
    """Without the reload the server keeps the base: the first round matches, later ones are off-policy and TIS
    weighs their tokens (what a wrong sync would look like in the log)."""
    stale, served = logged(runs["stale"]), logged(runs["served"])
    assert stale[0]["sampler_gap_max"] < 1e-5 and stale[0]["reward"] == served[0]["reward"]
    assert stale[-1]["sampler_gap_max"] > 1e-3
    assert stale[-1]["tis_weight"] != pytest.approx(1.0, abs=1e-4)


def test_a_server_that_disappears_fails_the_step_with_one_line_and_the_run_resumes_exactly(
        server: str, runs: dict[str, Path], tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    proxy = FlakyProxy(server, healthy=2 * 3)  # 2 prompts a round: rounds 0-2 are served, round 3 is not
    try:
        run = tmp_path / "flaky"
        code = main(rl_args(run, "grpo", *STEPS, "--rollout-url", proxy.url, "--checkpoint-every", "2"))
        err = capsys.readouterr().err.strip().splitlines()
        assert code == 1
        assert err[-1].startswith(f"tinylm: error: rollout server {proxy.url}/v1/completions: RemoteProtocolError")
        assert [p.name for p in list_checkpoints(run)] == ["step_00000002"]
        proxy.heal()
        assert main(rl_args(run, "grpo", *STEPS, "--rollout-url", proxy.url, "--resume", "latest")) == 0
    finally:
        proxy.close()
    # the rollouts repeat exactly; the losses carry the TIS weights, whose server log-probs round differently
    # (~1e-7) with the rows a continuous batch happens to hold at each step
    served, resumed = logged(runs["served"]), logged(run)
    assert [r["step"] for r in resumed] == [1, 2, 3, 4]
    assert [{k: r[k] for k in SAME} for r in resumed] == [{k: r[k] for k in SAME} for r in served]
    assert [r["loss"] for r in resumed] == pytest.approx([r["loss"] for r in served], rel=1e-5, abs=1e-6)


def test_two_torchrun_processes_sampling_from_the_server_equal_one(server: str, runs: dict[str, Path], tmp_path: Path,
                                                                   monkeypatch: pytest.MonkeyPatch) -> None:
    """Rank 0 syncs, every rank sends its own prompts: the same global batch gives one process's rollouts."""
    monkeypatch.setenv("PYTHONPATH", str(Path(__file__).parent))
    result = torchrun(*rl_args(tmp_path / "ddp", "grpo", *STEPS, "--batch-size", "1", "--rollout-url", server))
    assert result.returncode == 0, result.stderr[-3000:]
    served, ddp = logged(runs["served"]), logged(tmp_path / "ddp")
    assert [{k: r[k] for k in SAME} for r in ddp] == [{k: r[k] for k in SAME} for r in served]
    assert [r["loss"] for r in ddp] == pytest.approx([r["loss"] for r in served], rel=1e-4, abs=1e-6)
    assert all(r["sampler_gap_max"] < 1e-5 for r in ddp)


def test_a_temperature_the_servers_raw_log_probs_cannot_match_is_refused(server: str, tmp_path: Path,
                                                                          capsys: pytest.CaptureFixture[str]) -> None:
    """tinylm serve says its log-probs mode in /v1/models: raw ones are log softmax(z), not log softmax(z / T)."""
    assert main(rl_args(tmp_path / "r", "grpo", "--rollout-url", server, "--temperature", "0.7",
                        "--max-steps", "1")) == 1
    assert capsys.readouterr().err.strip().splitlines()[-1] == (
        f"tinylm: error: --temperature 0.7 needs the log-probs of the tempered distribution, but {server} returns "
        "raw ones: start tinylm serve with --logprobs-mode processed")
    assert main(rl_args(tmp_path / "r3", "grpo", "--rollout-url", server, "--temperature", "2.5",
                        "--max-steps", "1")) == 1
    assert capsys.readouterr().err.strip().splitlines()[-1] == (
        "tinylm: error: --temperature 2.5 is above 2, the most an OpenAI-compatible server (tinylm serve too) samples "
        "at: use --temperature 2 or less, or sample in-process (no --rollout-url)")


def test_a_server_that_is_not_there_is_one_line_before_any_training(tmp_path: Path,
                                                                    capsys: pytest.CaptureFixture[str]) -> None:
    url = f"http://127.0.0.1:{free_port()}"
    assert main(rl_args(tmp_path / "r", "grpo", "--rollout-url", url, "--max-steps", "1")) == 1
    err = capsys.readouterr().err.strip().splitlines()
    assert err[-1].startswith(f"tinylm: error: rollout server {url}/v1/models: ConnectError")
    assert main(rl_args(tmp_path / "r2", "grpo", "--rollout-url", "127.0.0.1:8000", "--max-steps", "1")) == 1
    assert capsys.readouterr().err.strip().splitlines()[-1] == (
        "tinylm: error: --rollout-url must be an http(s) URL, got '127.0.0.1:8000'")
