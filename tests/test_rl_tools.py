"""RL over multi-turn rollouts with tools: a trajectory is one row, tool results are context, never actions.

The policy is the hand-written bigram of tests/chat_stop_support.py, whose greedy turn is a calculator
call, with noise on every block weight: attention and positions matter, and sampling at temperature
1 strays from the chain now and then, so trajectories differ (some call, some answer, some fumble).
"""

from __future__ import annotations

from pathlib import Path

import pytest
import torch

from chat_stop_support import chat_checkpoint
from serve_support import CORPUS
from test_ddp import torchrun
from test_rl import ALGOS, TESTS, final_weights, rl_args, rl_config
from test_train_support import losses, rows
from tinylm.checkpoint import load_model
from tinylm.cli.main import main
from tinylm.inference.sampling import SamplingParams
from tinylm.stages.rl.rollout import policy_logprobs
from tinylm.stages.rl.stage import RLStage
from tinylm.stages.rl.tool_rollouts import sample_tool_rollouts
from tinylm.tasks.registry import get_task
from tinylm.tokenizer import Tokenizer
from tinylm.tokenizer.chat_format import ChatFormat
from tinylm.tools import get_tools
from tinylm.train.loop import run_training

pytestmark = pytest.mark.usefixtures("one_thread")

CALL_TEXT = 'calculator\n{"expression": "2*3"}'
TASK = "builtin:calc?hard_share=1"


def calling_chain(tokenizer: Tokenizer) -> list[int]:
    agent = tokenizer.special_tokens
    return [agent["<|call|>"], *tokenizer.encode_ordinary(CALL_TEXT), agent["<|/call|>"], agent["<|end|>"]]


@pytest.fixture(scope="module")
def caller(tmp_path_factory: pytest.TempPathFactory) -> Path:
    run_dir, _ = chat_checkpoint(tmp_path_factory.mktemp("rl-tools"), calling_chain, "caller",
                                 CORPUS + [CALL_TEXT] * 30, context_length=512, noise=0.02, weight=1.6)
    return run_dir


def tool_config(out: Path, algo: str, base: Path, **changes):
    """The bigram never answers right: the reward that varies is the tool penalty's (calls that strayed)."""
    return rl_config(out, algo, base=str(base), task=TASK, max_new_tokens=24, max_turns=2,
                     **{"tool_penalty": 0.5, **changes})


def test_the_mask_holds_only_sampled_tokens_and_their_logprobs_are_the_recompute(caller: Path) -> None:
    model, tokenizer, _ = load_model(caller)
    chat = ChatFormat.from_tokenizer(tokenizer)
    prompts = [e.prompt for e in get_task(TASK).examples("train", 3, seed=0)]
    rollouts = sample_tool_rollouts(model, chat, prompts, 4, 24, SamplingParams(temperature=1.0), [11, 12, 13],
                                    get_tools("calculator"), tokenizer.eot_id, max_turns=3)
    assert sum(rollouts.calls) >= 4 and len(set(rollouts.failed_calls)) > 1  # they call, some of them badly
    tool, assistant = chat.role_ids["tool"], chat.role_ids["assistant"]
    for row, mask, response in zip(rollouts.ids.tolist(), rollouts.response_mask, rollouts.responses):
        produced = [row[t + 1] for t in range(len(row) - 1) if mask[t]]
        assert produced == response and tool not in produced and assistant not in produced
        # every tool turn (<|tool|> ... <|end|>) is context: none of its tokens is a target of the loss
        for start in [t for t, token in enumerate(row) if token == tool]:
            end = row.index(chat.end_id, start)
            assert not mask[start - 1:end].any()
    recomputed, _ = policy_logprobs(model, rollouts.ids, 1.0, rollouts.response_mask)
    on = rollouts.response_mask > 0
    assert (recomputed[on] - rollouts.logprobs[on]).abs().max() < 1e-5
    # a row's trajectory is a function of its seed and the weights: sampled alone, the same ids
    alone = sample_tool_rollouts(model, chat, prompts[1:2], 4, 24, SamplingParams(temperature=1.0), [12],
                                 get_tools("calculator"), tokenizer.eot_id, max_turns=3)
    width = alone.ids.shape[1]
    assert torch.equal(alone.ids, rollouts.ids[4:8, :width]) and not rollouts.ids[4:8, width:].ne(
        tokenizer.eot_id).any()


@pytest.mark.parametrize("algo", [a if a in ("grpo", "ppo") else pytest.param(a, marks=pytest.mark.slow)
                                  for a in ALGOS])
def test_every_algorithm_trains_on_trajectories_and_accumulation_equals_one_batch(
        tmp_path: Path, caller: Path, algo: str) -> None:
    run_training(tool_config(tmp_path / "one", algo, caller, batch_size=4), stage=RLStage())
    run_training(tool_config(tmp_path / "accum", algo, caller, batch_size=2, grad_accum=2), stage=RLStage())
    assert losses(tmp_path / "accum") == pytest.approx(losses(tmp_path / "one"), abs=1e-6)
    one, accum = final_weights(tmp_path / "one"), final_weights(tmp_path / "accum")
    for name in one:
        assert torch.allclose(one[name], accum[name], atol=2e-6), name
    logged = [r for r in rows(tmp_path / "one") if "loss" in r]
    assert all(r["tool_calls"] > 0 for r in logged) and all("failed_calls" in r for r in logged)


def test_a_failed_call_costs_the_tool_penalty(tmp_path: Path, caller: Path) -> None:
    run_training(tool_config(tmp_path / "free", "grpo", caller, max_steps=1, tool_penalty=0.0), stage=RLStage())
    run_training(tool_config(tmp_path / "penalised", "grpo", caller, max_steps=1, tool_penalty=0.5),
                 stage=RLStage())
    free, penalised = ([r for r in rows(tmp_path / name) if "loss" in r][0] for name in ("free", "penalised"))
    assert free["failed_calls"] == penalised["failed_calls"] > 0  # the same first rollouts
    assert penalised["reward"] == pytest.approx(free["reward"] - 0.5 * free["failed_calls"])


@pytest.mark.slow  # the sampling is per rank as without tools, which the default suite's torchrun test covers
def test_torchrun_two_processes_equal_one_with_tools(tmp_path: Path, caller: Path,
                                                     monkeypatch: pytest.MonkeyPatch) -> None:
    run_training(tool_config(tmp_path / "single", "grpo", caller, batch_size=4), stage=RLStage())
    monkeypatch.setenv("PYTHONPATH", str(TESTS))
    args = rl_args(tmp_path / "ddp", "grpo", "--base", str(caller), "--task", TASK, "--max-new-tokens", "24",
                   "--max-turns", "2", "--tool-penalty", "0.5", "--batch-size", "2", "--max-steps", "2")
    result = torchrun(*args)
    assert result.returncode == 0, result.stderr[-3000:]
    assert losses(tmp_path / "ddp") == pytest.approx(losses(tmp_path / "single"), abs=1e-6)
    single, ddp = final_weights(tmp_path / "single"), final_weights(tmp_path / "ddp")
    for name in single:
        assert torch.allclose(single[name], ddp[name], atol=1e-5), name


def test_the_cli_says_the_tools_and_refuses_them_with_a_rollout_server(tmp_path: Path, caller: Path,
                                                                       capsys: pytest.CaptureFixture[str]) -> None:
    args = rl_args(tmp_path / "cli", "grpo", "--base", str(caller), "--task", "builtin:arith?digits=1&ops=+",
                   "--tools", "calculator", "--max-new-tokens", "24", "--max-turns", "2", "--max-steps", "1")
    assert main(args) == 0
    said = capsys.readouterr()
    assert "tools: calculator: up to 2 turns per rollout" in said.out + said.err
    assert [r for r in rows(tmp_path / "cli") if "loss" in r][0]["tool_calls"] > 0  # arith prompts declare it now
    assert main([*args, "--rollout-url", "http://127.0.0.1:9"]) == 1
    assert "cannot sample on --rollout-url" in capsys.readouterr().err
    # a task whose own tools the rollouts run (builtin:calc's calculator) is refused alike, in one line, before a
    # first evaluation (it ended in a KeyError traceback)
    own = rl_args(tmp_path / "own", "grpo", "--base", str(caller), "--task", "builtin:calc", "--max-new-tokens", "24",
                  "--max-steps", "1", "--rollout-url", "http://127.0.0.1:9")
    assert main(own) == 1
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "builtin:calc gives the rollouts the tool(s) calculator" in err[0], err
