"""RL (and every command that names a task) on the user's own prompts: a JSONL file of {"prompt", "answer"} rows.

`tinylm rl --task data/prompts.jsonl` was refused as "unknown task"."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from test_rl import rl_args
from test_train_support import rows
from tinylm.checkpoint import list_checkpoints
from tinylm.cli.main import main
from tinylm.errors import TinyLMError
from tinylm.stages.rl.rewards import load_reward
from tinylm.tasks.prompt_file import PromptFileTask
from tinylm.tasks.registry import get_task, is_task_spec
from tinylm.tasks.task import split_of

pytestmark = pytest.mark.usefixtures("one_thread")

PROMPTS = [{"prompt": f"What is {a} + {b}?", "answer": a + b if a % 2 else str(a + b)}  # a number or its text
           for a in range(8) for b in range(5)]


def prompt_file(path: Path, lines: list[str] | None = None) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text("".join(line + "\n" for line in (lines or [json.dumps(p) for p in PROMPTS])), encoding="utf-8")
    return path


def test_a_prompt_file_is_a_task_with_a_held_out_share_and_an_exact_verifier(tmp_path: Path) -> None:
    file = prompt_file(tmp_path / "prompts.jsonl")
    task = get_task(f"prompts:{file}")
    assert isinstance(task, PromptFileTask) and is_task_spec(f"prompts:{file}")
    train, test = task.examples("train", 1000), task.examples("test", 1000)
    assert len(train) + len(test) == len(PROMPTS) and test and not {e.key for e in train} & {e.key for e in test}
    assert all(split_of(e.key) == "test" for e in test)
    assert task.examples("train", 5, seed=1) == task.examples("train", 5, seed=1)
    example = next(e for e in train if e.key == "What is 1 + 2?")
    assert example.prompt == [{"role": "user", "content": "What is 1 + 2?"}] and example.answer == "3"  # 3 as text
    assert task.verify(" 3\n", example) and not task.verify("3.", example) and not task.verify("33", example)
    assert load_reward("exact", task).score(["3", "4"], [example] * 2).rewards == [1.0, 0.0]


@pytest.mark.parametrize(("line", "message"), [
    ('{"prompt": "Hi?"}', r'prompts.jsonl:2: not a prompt row: it needs "prompt" and "answer" \(got \[\'prompt\'\]\)'),
    ('["Hi?", "yes"]', r"prompts.jsonl:2: not a prompt row: .* \(got list\)"),
    ('{"prompt": "", "answer": "x"}', r'prompts.jsonl:2: "prompt" must be non-empty text'),
    ('{"prompt": "Hi?", "answer": null}', r'prompts.jsonl:2: "answer" must be non-empty text or a number, got None'),
    ('{"prompt": "Hi?", "answer": true}', r'prompts.jsonl:2: "answer" must be non-empty text or a number, got True'),
    ('{"prompt": "Hi?", ', r"prompts.jsonl:2: malformed JSON"),
])
def test_a_bad_row_is_an_error_at_its_file_and_line(tmp_path: Path, line: str, message: str) -> None:
    file = prompt_file(tmp_path / "prompts.jsonl", [json.dumps(PROMPTS[0]), line, json.dumps(PROMPTS[1])])
    with pytest.raises(TinyLMError, match=message):
        get_task(f"prompts:{file}")


def test_a_file_with_no_training_prompt_says_so(tmp_path: Path) -> None:
    held_out = next(p for p in PROMPTS if split_of(p["prompt"]) == "test")
    task = get_task(f"prompts:{prompt_file(tmp_path / 'one.jsonl', [json.dumps(held_out)])}")
    assert len(task.examples("test", 10)) == 1
    with pytest.raises(TinyLMError, match="none of its 1 row\\(s\\) is a training prompt"):
        task.examples("train", 10)


def test_rl_trains_two_steps_on_a_jsonl_of_prompts(tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                                   capsys: pytest.CaptureFixture[str]) -> None:
    prompt_file(tmp_path / "data" / "prompts.jsonl")
    monkeypatch.chdir(tmp_path)
    args = rl_args(tmp_path / "run", "grpo", "--max-steps", "2", "--eval-every", "1")
    args[args.index("--task") + 1] = "data/prompts.jsonl"  # as the user typed it, from the working folder
    assert main(args) == 0
    assert "held-out exact-match" in capsys.readouterr().out
    assert len([r for r in rows(tmp_path / "run") if "loss" in r]) == 2
    assert [r["step"] for r in rows(tmp_path / "run") if "exact_match" in r] == [0, 1, 2]
    meta = json.loads((list_checkpoints(tmp_path / "run")[-1] / "config.json").read_text())
    assert meta["train"]["task"] == "data/prompts.jsonl" and meta["step"] == 2


def test_rl_on_a_bad_prompt_file_is_one_line(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    file = prompt_file(tmp_path / "bad.jsonl", [json.dumps(PROMPTS[0]), '{"question": "Hi?", "answer": "1"}'])
    args = rl_args(tmp_path / "run", "grpo", "--max-steps", "2")
    args[args.index("--task") + 1] = str(file)
    capsys.readouterr()
    assert main(args) == 1
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and f"{file}:2: not a prompt row" in err[0], err
