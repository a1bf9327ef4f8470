"""The reward sources of `tinylm rl`: verifiers, answer format, sandboxed Python, user functions, the
reward-model hook, and failures that score 0 and are counted instead of stopping a run."""

from __future__ import annotations

import math
from pathlib import Path

import pytest

from tinylm.errors import TinyLMError
from tinylm.stages.rl.rewards import FORMAT_BONUS, has_answer_format, load_reward
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
    reward = load_reward("test_rl_rewards:user_reward", TASK)
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
