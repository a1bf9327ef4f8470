"""`tinylm chat` and `generate --chat` speak a fine-tuned checkpoint's chat format: one user turn per line
(scriptable through a pipe), replies that end at the end-of-turn token, the oldest turns dropped first."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from test_sft import base_run
from test_sft_export import sft_run
from tinylm.checkpoint import load_model
from tinylm.cli.main import main
from tinylm.evaluate.exact_match import generate_replies
from tinylm.tokenizer.chat_format import ChatFormat

pytestmark = pytest.mark.usefixtures("one_thread")


def chat(run: Path, stdin: str, *extra: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "tinylm", "chat", "--checkpoint", str(run), "--temperature", "0",
                           "--threads", "1", "--max-new-tokens", "6", *extra], input=stdin, capture_output=True,
                          text=True, timeout=120)


def test_piped_lines_are_user_turns_and_each_reply_is_one_line() -> None:
    result = chat(sft_run(0), "1 + 2?\n3 + 4?\n", "--system", "Be brief.")  # a 32-token window
    assert result.returncode == 0, result.stderr
    assert "its chat format" in result.stderr
    replies = result.stdout.splitlines()
    assert len(replies) == 2
    model, tokenizer, _ = load_model(sft_run(0))
    fmt = ChatFormat.from_tokenizer(tokenizer)
    system = [{"role": "system", "content": "Be brief."}]
    first = generate_replies(model, fmt, [[*system, {"role": "user", "content": "1 + 2?"}]], 6)[0]
    assert replies[0] == first  # greedy, and it stopped where the end-of-turn token came (or at the limit)


def test_a_long_chat_drops_the_oldest_exchanges_with_a_notice() -> None:
    lines = "".join(f"{i} + {i}?\n" for i in range(8))
    result = chat(sft_run(0), lines)
    assert result.returncode == 0, result.stderr
    assert "oldest exchange(s)" in result.stderr and len(result.stdout.splitlines()) == 8


def test_generate_chat_answers_a_user_message_and_refuses_a_base_model(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["generate", "--checkpoint", str(sft_run(0)), "--chat", "--prompt", "What is 1 + 2?",
                 "--temperature", "0", "--max-new-tokens", "6", "--threads", "1"]) == 0
    reply = capsys.readouterr().out.strip()
    model, tokenizer, _ = load_model(sft_run(0))
    expected = generate_replies(model, ChatFormat.from_tokenizer(tokenizer),
                                [[{"role": "user", "content": "What is 1 + 2?"}]], 6)[0]
    assert reply == expected.strip()
    assert main(["generate", "--checkpoint", str(base_run()), "--chat", "--prompt", "hi"]) == 1
    err = capsys.readouterr().err.strip().splitlines()
    assert err[-1].startswith("tinylm: error:") and "no chat template" in err[-1]
