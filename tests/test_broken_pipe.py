"""`tinylm generate ... | head -c 10`: a reader that closes our stdout early ends the command quietly.

Quietly means no traceback and no "Exception ignored ... BrokenPipeError" from the interpreter's
last flush, and the exit status a shell gives a process stopped by SIGPIPE (141).
"""

from __future__ import annotations

import io
import os
import subprocess
import sys
from pathlib import Path

import pytest

import tinylm.cli.commands.generate as generate_command
from test_generate_cli import make_run
from tinylm.cli.main import main
from tinylm.errors import CLOSED_PIPE_EXIT


@pytest.fixture(scope="module")
def run_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return make_run(tmp_path_factory.mktemp("pipe"))


def closed_early(args: list[str], stdin: str = "") -> tuple[int, str]:
    """Run `python -m tinylm ARGS`, read 10 bytes of its stdout, close the pipe; (exit status, stderr)."""
    env = {**os.environ, "OMP_NUM_THREADS": "1"}
    process = subprocess.Popen([sys.executable, "-m", "tinylm", *args], stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                               stderr=subprocess.PIPE, env=env)
    assert process.stdin is not None and process.stdout is not None and process.stderr is not None
    process.stdin.write(stdin.encode())
    process.stdin.close()
    assert len(process.stdout.read(10)) == 10
    process.stdout.close()
    err = process.stderr.read().decode()
    return process.wait(timeout=120), err


def test_generate_into_a_closed_pipe_exits_quietly(run_dir: Path) -> None:
    code, err = closed_early(["generate", "--checkpoint", str(run_dir), "--max-new-tokens", "2000",
                              "--temperature", "1", "--num-samples", "50"])
    assert code == CLOSED_PIPE_EXIT
    assert "Traceback" not in err and "Exception ignored" not in err and "BrokenPipe" not in err, err


def test_chat_into_a_closed_pipe_exits_quietly(run_dir: Path) -> None:
    code, err = closed_early(["chat", "--checkpoint", str(run_dir), "--temperature", "1"], stdin="hello\n" * 500)
    assert code == CLOSED_PIPE_EXIT
    assert "Traceback" not in err and "Exception ignored" not in err and "BrokenPipe" not in err, err


class ClosedStdout(io.StringIO):
    def write(self, text: str) -> int:
        raise BrokenPipeError(32, "Broken pipe")


def test_in_process_a_closed_stdout_is_not_an_error(monkeypatch, capsys) -> None:
    def writes(args) -> int:
        sys.stdout.write("text")
        return 0

    monkeypatch.setattr(generate_command, "run", writes)
    monkeypatch.setattr(sys, "stdout", ClosedStdout())
    assert main(["generate", "--checkpoint", "x"]) == CLOSED_PIPE_EXIT
    assert capsys.readouterr().err == ""
