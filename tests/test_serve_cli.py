"""`tinylm serve` as a process: answers curl, refuses a bad checkpoint or a busy port in one line, and exits
cleanly on SIGTERM."""

from __future__ import annotations

import json
import os
import shutil
import signal
import socket
import subprocess
import sys
from pathlib import Path

import pytest

from serve_support import free_port, make_checkpoint
from tinylm.cli.main import main


@pytest.fixture(scope="module")
def run_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return make_checkpoint(tmp_path_factory.mktemp("serve-cli"))


def serve(*args: str) -> subprocess.Popen[str]:
    return subprocess.Popen([sys.executable, "-m", "tinylm", "serve", "--threads", "1", *args], text=True,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                            env={**os.environ, "PYTHONIOENCODING": "utf-8"})


def refused(capsys: pytest.CaptureFixture[str], *args: str) -> str:
    """The stderr of a `tinylm serve` that must exit 1 before serving anything: exactly one line."""
    assert main(["serve", "--threads", "1", *args]) == 1
    err = capsys.readouterr().err
    assert len(err.strip().splitlines()) == 1 and "Traceback" not in err
    return err


def test_missing_and_corrupt_checkpoints_stop_before_binding(run_dir: Path, tmp_path: Path, capsys) -> None:
    port = free_port()
    assert "not found" in refused(capsys, "--checkpoint", str(tmp_path / "nothing"), "--port", str(port))
    broken = tmp_path / "broken"
    shutil.copytree(run_dir, broken)
    for weights in broken.rglob("model.safetensors"):
        weights.write_bytes(b"not a safetensors file")
    assert "corrupt" in refused(capsys, "--checkpoint", str(broken), "--port", str(port))
    with socket.socket() as probe:  # nothing was bound
        probe.bind(("127.0.0.1", port))


def test_a_port_in_use_is_one_line(run_dir: Path, capsys) -> None:
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        err = refused(capsys, "--checkpoint", str(run_dir), "--port", str(port))
        assert f"cannot listen on 127.0.0.1:{port}" in err


@pytest.mark.skipif(shutil.which("curl") is None, reason="curl is not installed")
def test_serves_curl_and_exits_cleanly_on_sigterm(run_dir: Path) -> None:
    port = free_port()
    process = serve("--checkpoint", str(run_dir), "--port", str(port))
    try:
        banner = process.stderr.readline()  # printed once the checkpoint is loaded and the port bound
        assert f"http://127.0.0.1:{port}/v1" in banner, banner
        body = json.dumps({"model": run_dir.name, "prompt": "def add(", "max_tokens": 5, "temperature": 0})
        curl = ["curl", "-sS", "--max-time", "30", "--retry", "5", "--retry-connrefused", "--retry-delay", "1",
                "-H", "Content-Type: application/json", "-d", body, f"http://127.0.0.1:{port}/v1/completions"]
        reply = json.loads(subprocess.run(curl, capture_output=True, text=True, timeout=60, check=True).stdout)
        assert reply["usage"]["completion_tokens"] == 5 and reply["choices"][0]["finish_reason"] == "length"
        process.send_signal(signal.SIGTERM)
        _, err = process.communicate(timeout=60)
        assert process.returncode == 0 and "server stopped" in err and "Traceback" not in err
    finally:
        if process.poll() is None:
            process.kill()
            process.wait(10)
    with socket.socket() as again:  # the port is free again
        again.bind(("127.0.0.1", port))


def test_the_listening_socket_gives_connections_without_nagle() -> None:
    """asyncio disables Nagle only on sockets created as TCP; with Nagle a streamed chunk can wait 40 ms for
    the client's delayed ACK. Checked on a connection accepted the way uvicorn accepts it."""
    import asyncio

    from tinylm.cli.commands.serve import bind

    async def accepted_nodelay() -> int:
        seen: asyncio.Future[int] = asyncio.get_running_loop().create_future()

        def on_connect(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
            seen.set_result(writer.get_extra_info("socket").getsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY))
            writer.close()

        server = await asyncio.start_server(on_connect, sock=bind("127.0.0.1", 0))
        port = server.sockets[0].getsockname()[1]
        _, writer = await asyncio.open_connection("127.0.0.1", port)
        value = await asyncio.wait_for(seen, 10)
        writer.close()
        server.close()
        return value

    assert asyncio.run(accepted_nodelay()) == 1


def test_an_unknown_builtin_tool_is_one_line_before_binding(run_dir: Path, capsys) -> None:
    err = refused(capsys, "--checkpoint", str(run_dir), "--port", str(free_port()), "--tools", "calculator,abacus")
    assert "unknown tool 'abacus'" in err and "calculator, python" in err
