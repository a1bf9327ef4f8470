"""The reward sources of `tinylm rl`: verifiers, answer format, sandboxed Python, user functions, the
reward-model hook, and failures that score 0 and are counted instead of stopping a run."""

from __future__ import annotations

import math
import os
import sys
import time
from pathlib import Path

import pytest

from tinylm.errors import TinyLMError
from tinylm.stages.rl.rewards import FORMAT_BONUS, RewardsInterrupted, has_answer_format, load_reward
from tinylm.tasks.registry import get_task
from tinylm.tasks.task import Example, conversation

TASK = get_task("builtin:arith?digits=2&ops=+")
EXAMPLE = conversation("12+30", "What is 12 + 30?", "42")


def test_exact_reward_is_the_tasks_verifier() -> None:
    scores = load_reward("exact", TASK).score(["42", "The answer is 42.", "41", ""], [EXAMPLE] * 4)
    assert scores.rewards == [1.0, 1.0, 0.0, 0.0] and scores.failures == 0


def test_the_format_bonus_rewards_a_bare_integer() -> None:
    assert has_answer_format(" 42 ", TASK) and not has_answer_format("it is 42", TASK)
    scores = load_reward("exact+format", TASK).score(["42", "it is 42", "7"], [EXAMPLE] * 3)
    assert scores.rewards == pytest.approx([1 + FORMAT_BONUS, 1.0, FORMAT_BONUS])


def test_python_reward_runs_the_answer_in_the_sandbox() -> None:
    scores = load_reward("python", TASK).score(["print(12 + 30)", "print(41)", "import os; os.system('true')"],
                                               [EXAMPLE] * 3)
    assert scores.rewards == [1.0, 0.0, 0.0]


def user_reward(response: str, example: Example) -> float:
    if response == "boom":
        raise RuntimeError("no")
    return {"nan": math.nan, "inf": math.inf, "text": "high"}.get(response, len(response))  # type: ignore[return-value]


def test_a_user_function_is_called_and_its_failures_score_zero_and_are_counted() -> None:
    reward = load_reward("test_rl_rewards:user_reward", TASK, errors="zero")
    scores = reward.score(["abc", "boom", "nan", "inf", "text"], [EXAMPLE] * 5)
    assert scores.rewards == [3.0, 0.0, 0.0, 0.0, 0.0] and scores.failures == 4
    assert scores.first_failure is not None and "RuntimeError: no" in scores.first_failure


@pytest.mark.parametrize(("spec", "message"), [
    ("no_such_module_xyz:f", "cannot import"),
    ("test_rl_rewards:missing", "has no function"),
    ("bogus", "unknown --reward"),
])
def test_a_bad_reward_spec_is_one_clear_error(spec: str, message: str) -> None:
    with pytest.raises(TinyLMError, match=message):
        load_reward(spec, TASK)


def test_a_reward_model_checkpoint_scores_prompt_plus_response(tmp_path: Path) -> None:
    """A `tinylm reward`-format checkpoint (a micro backbone + score head) scores each rendered conversation
    exactly as the model itself does on the ids rendered by hand."""
    import torch

    from test_sft import base_run
    from tinylm.checkpoint import TOKENIZER, checkpoint_model_config, load_weights, resolve_checkpoint, save_checkpoint
    from tinylm.models.factory import build_model
    from tinylm.models.reward_model import RewardModel
    from tinylm.tokenizer import load_tokenizer
    from tinylm.tokenizer.chat_format import ChatFormat

    base = resolve_checkpoint(base_run())
    config = checkpoint_model_config(base)
    backbone = build_model(config)
    load_weights(backbone, base)
    torch.manual_seed(0)
    model = RewardModel(backbone).eval()
    save_checkpoint(tmp_path / "rm", 1, model, config, tokenizer_file=base / TOKENIZER, meta={"reward_head": "score"})
    task = get_task("builtin:arith?digits=1&ops=+")
    example = task.examples("train", 1, 0)[0]
    responses = ["3", "a longer answer", ""]
    scores = load_reward(f"model:{tmp_path / 'rm'}", task).score(responses, [example] * 3)
    chat = ChatFormat.from_tokenizer(load_tokenizer(base / TOKENIZER))
    with torch.no_grad():
        expected = [model(torch.tensor([ids]), torch.tensor([len(ids)])).item() for ids in
                    (chat.render([*example.prompt, {"role": "assistant", "content": r}]).ids for r in responses)]
    assert scores.failures == 0 and scores.rewards == pytest.approx(expected, abs=1e-5)
    assert len(set(scores.rewards)) == 3


def test_a_checkpoint_that_is_not_a_reward_model_is_refused() -> None:
    from test_sft import base_run

    with pytest.raises(TinyLMError, match="not a reward model"):
        load_reward(f"model:{base_run()}", TASK)


def always_raises(response: str, example: Example) -> float:
    raise ValueError(f"cannot score {response!r}")


def sleeps(response: str, example: Example) -> float:
    time.sleep(0.5 if response == "quick" else 30)
    return 1.0


def test_a_failing_reward_stops_with_its_first_exception_unless_zero_is_asked() -> None:
    with pytest.raises(TinyLMError, match=r"^reward test_rl_rewards:user_reward raised RuntimeError: no on sample 1"):
        load_reward("test_rl_rewards:user_reward", TASK).score(["abc", "boom", "nan"], [EXAMPLE] * 3)
    with pytest.raises(TinyLMError, match=r"^reward test_rl_rewards:user_reward returned nan on sample 0"):
        load_reward("test_rl_rewards:user_reward", TASK).score(["nan"], [EXAMPLE])
    scores = load_reward("test_rl_rewards:always_raises", TASK, errors="zero").score(["a", "b"], [EXAMPLE] * 2)
    assert scores.rewards == [0.0, 0.0] and scores.failures == 2
    assert scores.first_failure == ("reward test_rl_rewards:always_raises raised ValueError: cannot score 'a' "
                                    "on sample 0")


def test_a_reward_past_its_timeout_fails_in_bounded_time() -> None:
    start = time.monotonic()
    with pytest.raises(TinyLMError, match=r"^reward test_rl_rewards:sleeps took longer than 0.2 s \(--reward-timeout\) "
                                          r"on sample 0"):
        load_reward("test_rl_rewards:sleeps", TASK, timeout=0.2).score(["slow", "slow"], [EXAMPLE] * 2)
    scores = load_reward("test_rl_rewards:sleeps", TASK, timeout=0.2, errors="zero").score(
        ["slow", "quick", "slow"], [EXAMPLE] * 3)
    assert scores.rewards == [0.0, 0.0, 0.0] and scores.failures == 3  # "quick" sleeps 0.5 s: past 0.2 too
    assert time.monotonic() - start < 5
    scores = load_reward("test_rl_rewards:sleeps", TASK, timeout=2).score(["quick", "quick"], [EXAMPLE] * 2)
    assert scores.rewards == [1.0, 1.0]


def test_a_stop_request_ends_the_wait_for_a_reward_at_once() -> None:
    start = time.monotonic()
    asked = iter([False, False, False, True])
    with pytest.raises(RewardsInterrupted):
        load_reward("test_rl_rewards:sleeps", TASK, timeout=60).score(["slow"] * 4, [EXAMPLE] * 4,
                                                                      should_stop=lambda: next(asked, True))
    assert time.monotonic() - start < 2


@pytest.mark.parametrize("form", ["name", "file", "nested file", "absolute file"])
def test_a_reward_module_in_the_working_folder_is_found_by_name_or_file(tmp_path: Path, form: str,
                                                                        monkeypatch: pytest.MonkeyPatch) -> None:
    """`tinylm` is a console script: its sys.path holds its own folder, not the one the user works in."""
    folder = tmp_path / "work"
    (folder / "rewards").mkdir(parents=True)
    name = f"my_reward_{form.replace(' ', '_')}"
    helper = f"{name}_helper"
    for where in (folder, folder / "rewards"):  # a module beside it, imported by it
        (where / f"{helper}.py").write_text("BONUS = 0.5\n")
    source = f"from {helper} import BONUS\n\ndef score(response, example):\n    return len(response) + BONUS\n"
    (folder / f"{name}.py").write_text(source)
    (folder / "rewards" / f"{name}.py").write_text(source)
    monkeypatch.chdir(folder)
    monkeypatch.setattr(sys, "path", [p for p in sys.path if p not in ("", ".", str(folder), os.getcwd())])
    before = list(sys.path)
    spec = {"name": f"{name}:score", "file": f"{name}.py:score", "nested file": f"rewards/{name}.py:score",
            "absolute file": f"{folder / name}.py:score"}[form]
    assert load_reward(spec, TASK).score(["abc"], [EXAMPLE]).rewards == [3.5]
    assert sys.path == before  # searched for the import, not left behind


@pytest.mark.parametrize(("spec", "message"), [
    ("nowhere.py:score", r"--reward nowhere.py:score: no file nowhere.py"),
    ("my_reward_x.py", r"--reward my_reward_x.py: name the function too: my_reward_x.py:FUNCTION"),
    ("broken.py:score", r"--reward broken.py:score: cannot import broken.py \(NameError: name 'undefined' is not"),
])
def test_a_bad_reward_file_is_one_clear_line(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, spec: str,
                                             message: str) -> None:
    (tmp_path / "broken.py").write_text("undefined\n")
    monkeypatch.chdir(tmp_path)
    with pytest.raises(TinyLMError, match=f"^{message}"):
        load_reward(spec, TASK)


@pytest.mark.slow  # ~20 s of deliberate hangs
def test_a_reward_that_hangs_again_and_again_is_refused_before_threads_pile_up() -> None:
    """With --reward-errors zero every timeout left a thread behind: past a few, the reward is refused."""
    import threading

    from tinylm.errors import TinyLMError
    from tinylm.stages.rl import reward_calls

    release = threading.Event()
    try:
        results = reward_calls.call_each(lambda: release.wait(30), [()] * (reward_calls.MAX_HUNG + 2), timeout=0.05)
        with pytest.raises(TinyLMError, match="hung past --reward-timeout"):
            for result in results:
                assert isinstance(result, reward_calls.RewardTimeout)
    finally:
        release.set()  # let the abandoned calls finish, so no other test sees them
        for thread in list(reward_calls._HUNG):
            thread.join(timeout=5)
        reward_calls._HUNG.clear()
