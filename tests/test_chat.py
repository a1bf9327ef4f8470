"""`tinylm chat` with stdin piped: streams replies, keeps history within the window, exits cleanly at EOF."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from test_generate_cli import make_run


@pytest.fixture(scope="module")
def run_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return make_run(tmp_path_factory.mktemp("chat"), context_length=32)


def _chat(run_dir: Path, stdin: str, *extra: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "tinylm", "chat", "--checkpoint", str(run_dir), *extra],
                          input=stdin, capture_output=True, text=True, timeout=120,
                          env={**os.environ, "PYTHONIOENCODING": "utf-8"})


def test_piped_conversation_gets_one_reply_per_line_and_exits_at_eof(run_dir: Path) -> None:
    """Ten turns of 12-token replies overflow the 32-token window many times over: history is trimmed."""
    lines = [f"def f{i}(x): return x + {i}" for i in range(10)]
    result = _chat(run_dir, "\n".join(lines) + "\n", "--temperature", "0", "--max-new-tokens", "12")
    assert result.returncode == 0, result.stderr
    assert "Traceback" not in result.stderr
    assert len(result.stdout.splitlines()) >= len(lines)  # every reply ends with a newline


def test_in_process_replies_match_the_engine_on_the_trimmed_history(run_dir: Path, monkeypatch, capsys) -> None:
    import io

    from tinylm.checkpoint import load_model
    from tinylm.cli.main import main
    from tinylm.inference.engine import Engine
    from tinylm.inference.sampling import GREEDY
    from tinylm.inference.streaming import TextStream

    monkeypatch.setattr(sys, "stdin", io.StringIO("class Point:\n/reset\nx = 1\n"))
    assert main(["chat", "--checkpoint", str(run_dir), "--temperature", "0", "--max-new-tokens", "8"]) == 0
    out, err = capsys.readouterr()
    model, tokenizer, _ = load_model(run_dir)
    engine = Engine(model)

    def reply(history: list[int]) -> str:
        ids = engine.generate([history[-(32 - 8):]], 8, GREEDY, stop_ids=[tokenizer.eot_id])[0]
        stream = TextStream(tokenizer)
        text = "".join(stream.push(i) for i in ids) + stream.flush()
        return text.replace("\\", "\\\\").replace("\n", "\\n") + "\n"  # scripted: one line per reply

    # after /reset the second reply sees only "x = 1\n"
    assert out == reply(tokenizer.encode("class Point:\n")) + reply(tokenizer.encode("x = 1\n"))
    assert "history cleared" in err


def test_scripted_chat_prints_exactly_one_line_per_turn(run_dir: Path, monkeypatch, capsys) -> None:
    """A reply with line breaks is one line: its line breaks (and backslashes) are written out as escapes."""
    import io

    from tinylm.checkpoint import load_model
    from tinylm.cli.main import main
    from tinylm.inference.engine import Engine

    tokenizer = load_model(run_dir)[1]
    replies = [tokenizer.encode("a\nb\\c"), tokenizer.encode("done")]

    def scripted(self: Engine, ids: list[int], *args, **kwargs):
        yield from replies.pop(0)

    monkeypatch.setattr(Engine, "stream", scripted)
    monkeypatch.setattr(sys, "stdin", io.StringIO("x = 1\nz\n"))
    assert main(["chat", "--checkpoint", str(run_dir), "--temperature", "0", "--max-new-tokens", "8"]) == 0
    out, err = capsys.readouterr()
    assert out.splitlines() == ["a\\nb\\\\c", "done"], err
    assert replies == []


def test_missing_checkpoint_is_one_line(tmp_path: Path) -> None:
    result = _chat(tmp_path / "nothing", "hi\n")
    assert result.returncode == 1
    assert result.stderr.strip().splitlines() == [f"tinylm: error: checkpoint not found: {tmp_path / 'nothing'}"]


def test_max_new_tokens_beyond_half_the_window_is_capped_with_a_notice(capsys) -> None:
    from tinylm.cli.commands.chat import reply_limit

    assert reply_limit(10, 32) == 10 and capsys.readouterr().err == ""
    assert reply_limit(16, 32) == 16 and capsys.readouterr().err == ""
    assert reply_limit(500, 32) == 16
    err = capsys.readouterr().err
    assert "--max-new-tokens 500 is capped at 16" in err and len(err.strip().splitlines()) == 1


def test_the_help_shows_its_scripted_example_as_typed(capsys: pytest.CaptureFixture[str]) -> None:
    """The example's `\\n` escapes are what the reader types into printf, not line breaks inside its quotes."""
    from tinylm.cli.main import main

    with pytest.raises(SystemExit):
        main(["chat", "--help"])
    assert "printf 'What is 2 + 3?\\nAnd 4 + 4?\\n' | tinylm chat" in capsys.readouterr().out
