"""`tinylm rl` end to end on a micro chat model: every algorithm runs and logs what it does, gradient
accumulation and torchrun equal one big batch, resume is bit-exact (mid-round too), and bad input is one line."""

from __future__ import annotations

import json
import math
import time
from pathlib import Path
from typing import Any

import pytest
import torch

from test_ddp import torchrun
from test_sft import base_run
from test_train_support import losses, rows
from tinylm.checkpoint import list_checkpoints, load_model, read_weights
from tinylm.cli.main import main
from tinylm.stages.pretrain import pretrain
from tinylm.stages.rl.algorithms import algorithms
from tinylm.stages.rl.config import RLConfig
from tinylm.stages.rl.stage import RLStage
from tinylm.tasks.task import Example
from tinylm.train.loop import run_training

pytestmark = pytest.mark.usefixtures("one_thread")

TASK = "builtin:arith?digits=1&ops=+"
ALGOS = tuple(algorithms())
TESTS = Path(__file__).parent


def varied_reward(response: str, example: Example) -> float:
    """A reward a micro model's answers actually vary in (the exact answer is out of its reach)."""
    return float(len(response) % 3) + float(example.answer in response)


def failing_reward(response: str, example: Example) -> float:
    if len(response) % 2:
        raise ValueError("cannot score this one")
    return math.nan if len(response) % 3 == 0 else 1.0


def rl_config(out: Path, algo: str, **changes: Any) -> RLConfig:
    base: dict[str, Any] = dict(base=str(base_run()), task=TASK, algo=algo, out=str(out), batch_size=2, group_size=3,
                                max_new_tokens=5, max_steps=2, eval_every=0, eval_examples=3, train_examples=40,
                                progress=False, threads=1, seed=5, lr=3e-3, reward="test_rl:varied_reward")
    base.update(changes)
    return RLConfig(**base)


def rl_args(out: Path, algo: str, *extra: str) -> list[str]:
    return ["rl", "--base", str(base_run()), "--task", TASK, "--algo", algo, "--out", str(out), "--batch-size", "2",
            "--group-size", "3", "--max-new-tokens", "5", "--eval-every", "0", "--eval-examples", "3",
            "--train-examples", "40", "--no-progress", "--threads", "1", "--seed", "5", "--lr", "0.003",
            "--reward", "test_rl:varied_reward", *extra]


def final_weights(run: Path) -> dict[str, torch.Tensor]:
    return read_weights(list_checkpoints(run)[-1])


@pytest.mark.parametrize("algo", ALGOS)
def test_every_algorithm_trains_and_logs_what_it_does(tmp_path: Path, algo: str) -> None:
    run_training(rl_config(tmp_path / algo, algo, max_steps=2, epochs=2 if algo in ("ppo", "grpo") else 1),
                 stage=RLStage())
    logged = [r for r in rows(tmp_path / algo) if "loss" in r]
    assert len(logged) == 2
    for row in logged:
        for key in ("reward", "accuracy", "clip_frac", "entropy", "response_length", "informative_frac",
                    "rollout_s", "update_s", "rollout_tokens_per_s", "ratio"):
            assert key in row and math.isfinite(row[key]), key
        assert 1 <= row["response_length"] <= 5 and 0 <= row["informative_frac"] <= 1
    assert logged[0]["grad_norm"] > 0  # the rewards differ within groups: something to learn
    assert logged[0]["ratio"] == pytest.approx(1.0, abs=1e-5)  # first epoch: on-policy
    if algo in ("grpo", "reinforce_pp", "ppo"):
        assert all(r["kl"] >= 0 for r in logged)
    if algo in ("ppo", "grpo"):  # the second epoch reuses the rollouts: the ratio has moved
        assert logged[1]["rollout_s"] == 0 and logged[1]["ratio"] != pytest.approx(1.0, abs=1e-7)
    model, _, meta = load_model(tmp_path / algo)  # a plain policy checkpoint, even with PPO's value head
    assert meta["stage"] == "rl" and meta["algo"] == algo
    assert [link["stage"] for link in meta["lineage"]] == ["pretrain", "rl"]


@pytest.mark.parametrize("algo", ALGOS)
def test_gradient_accumulation_equals_one_batch(tmp_path: Path, algo: str) -> None:
    run_training(rl_config(tmp_path / "one", algo, batch_size=4), stage=RLStage())
    run_training(rl_config(tmp_path / "accum", algo, batch_size=2, grad_accum=2), stage=RLStage())
    assert losses(tmp_path / "accum") == pytest.approx(losses(tmp_path / "one"), abs=1e-6)
    one, accum = final_weights(tmp_path / "one"), final_weights(tmp_path / "accum")
    for name in one:  # after two AdamW steps, which divide each gradient by its own size: float32 rounding
        assert torch.allclose(one[name], accum[name], atol=2e-6), name  # of a near-zero entry can reach 1e-6
    logged_one = [r for r in rows(tmp_path / "one") if "loss" in r]
    logged_accum = [r for r in rows(tmp_path / "accum") if "loss" in r]
    for a, b in zip(logged_one, logged_accum, strict=True):
        assert a["reward"] == pytest.approx(b["reward"]) and a["entropy"] == pytest.approx(b["entropy"], abs=1e-5)


@pytest.mark.parametrize(("algo", "nodes"), [
    *[pytest.param(a, 1, marks=[] if a == "grpo" else [pytest.mark.slow]) for a in ALGOS],
    pytest.param("grpo", 2, id="grpo-2nodes", marks=pytest.mark.slow)])  # two torchrun nodes on loopback
def test_torchrun_two_processes_equal_one(tmp_path: Path, algo: str, nodes: int,
                                          monkeypatch: pytest.MonkeyPatch) -> None:
    run_training(rl_config(tmp_path / "single", algo, batch_size=4), stage=RLStage())
    monkeypatch.setenv("PYTHONPATH", str(TESTS))
    result = torchrun(*rl_args(tmp_path / "ddp", algo, "--batch-size", "2", "--max-steps", "2"), nodes=nodes)
    assert result.returncode == 0, result.stderr[-3000:]
    assert losses(tmp_path / "ddp") == pytest.approx(losses(tmp_path / "single"), abs=1e-6)
    single, ddp = final_weights(tmp_path / "single"), final_weights(tmp_path / "ddp")
    for name in single:
        assert torch.allclose(single[name], ddp[name], atol=1e-5), name


@pytest.mark.parametrize("algo", ["grpo", "ppo"])
def test_resume_is_bit_exact_even_in_the_middle_of_a_round(tmp_path: Path, algo: str) -> None:
    """Two epochs per round: the split at step 3 falls inside round 2, whose rollouts the checkpoint keeps."""
    run_training(rl_config(tmp_path / "straight", algo, max_steps=4, epochs=2), stage=RLStage())
    run_training(rl_config(tmp_path / "split", algo, max_steps=3, epochs=2), stage=RLStage())
    run_training(rl_config(tmp_path / "split", algo, max_steps=4, epochs=2, resume="latest"), stage=RLStage())
    assert losses(tmp_path / "split") == losses(tmp_path / "straight")
    straight, split = final_weights(tmp_path / "straight"), final_weights(tmp_path / "split")
    assert all(torch.equal(straight[k], split[k]) for k in straight)


def always_failing_reward(response: str, example: Example) -> float:
    raise ValueError("no score for this")


def test_a_reward_that_raises_or_returns_nan_scores_zero_and_is_counted(tmp_path: Path,
                                                                      capsys: pytest.CaptureFixture[str]) -> None:
    """Only when asked (--reward-errors zero): counted in the log and in the closing lines."""
    assert main(rl_args(tmp_path / "r", "grpo", "--reward", "test_rl:failing_reward", "--max-steps", "2",
                        "--reward-errors", "zero")) == 0
    logged = [r for r in rows(tmp_path / "r") if "loss" in r]
    failed = sum(r["reward_failures"] for r in logged)
    assert failed > 0
    assert all(0 <= r["reward"] <= 1 for r in logged)
    captured = capsys.readouterr()
    assert "reward(s) failed and scored 0" in captured.out + captured.err
    assert f"reward failures: {failed:.0f} sample(s) scored 0 (--reward-errors zero); first: reward " \
           "test_rl:failing_reward" in captured.out + captured.err


def test_a_reward_that_fails_stops_the_run_with_its_first_exception(tmp_path: Path,
                                                                     capsys: pytest.CaptureFixture[str]) -> None:
    """It used to train to the end on zeros and exit 0."""
    code = main(rl_args(tmp_path / "r", "grpo", "--reward", "test_rl:always_failing_reward", "--max-steps", "2"))
    err = capsys.readouterr().err.strip().splitlines()  # the run's header, then the error
    assert code == 1 and err[-1].startswith("tinylm: error: reward test_rl:always_failing_reward raised ValueError: "
                                            "no score for this on sample 0"), err
    assert sum("error" in line for line in err) == 1
    assert not list_checkpoints(tmp_path / "r")


def hanging_reward(response: str, example: Example) -> float:
    time.sleep(60)
    return 1.0


def test_a_reward_past_its_timeout_stops_the_run_in_bounded_time(tmp_path: Path,
                                                                 capsys: pytest.CaptureFixture[str]) -> None:
    """A hung reward used to hang the run; now the call is abandoned after --reward-timeout seconds."""
    start = time.monotonic()
    code = main(rl_args(tmp_path / "r", "grpo", "--reward", "test_rl:hanging_reward", "--reward-timeout", "0.3"))
    err = capsys.readouterr().err.strip().splitlines()
    assert code == 1 and time.monotonic() - start < 30
    assert err[-1].startswith("tinylm: error: reward test_rl:hanging_reward took longer than 0.3 s "
                              "(--reward-timeout) on sample 0"), err


def test_the_cli_reports_the_exact_match_before_and_after(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(rl_args(tmp_path / "cli", "rloo", "--max-steps", "2", "--eval-every", "1")) == 0
    out = capsys.readouterr().out
    assert "held-out exact-match" in out and "->" in out
    evals = [r["step"] for r in rows(tmp_path / "cli") if "exact_match" in r]
    assert evals == [0, 1, 2]
    assert (tmp_path / "cli" / "loss.png").is_file() and (tmp_path / "cli" / "rl.png").is_file()
    (tmp_path / "cli" / "rl.png").unlink()  # `tinylm plot --rl` draws the same panels, for several runs too
    assert main(["plot", "--rl", str(tmp_path / "cli")]) == 0 and (tmp_path / "cli" / "rl.png").is_file()
    assert main(["plot", "--rl", str(tmp_path / "cli"), str(tmp_path / "cli"), "--out", str(tmp_path / "two.png")]) == 0
    assert (tmp_path / "two.png").stat().st_size > 1000


def test_plot_rl_draws_only_the_panels_some_run_has(tmp_path: Path) -> None:
    """An SFT run with --eval-every has held-out exact-match and nothing else: one panel, not four."""
    import matplotlib.image

    (tmp_path / "sft").mkdir()
    lines = [{"step": s, "elapsed_s": 10.0 * s, "loss": 1.0} for s in range(3)]
    lines += [{"step": s, "exact_match": 0.1 * s} for s in range(3)]
    (tmp_path / "sft" / "metrics.jsonl").write_text("".join(json.dumps(r) + "\n" for r in lines))
    assert main(["plot", "--rl", str(tmp_path / "sft"), "--out", str(tmp_path / "one.png")]) == 0
    assert matplotlib.image.imread(tmp_path / "one.png").shape[:2] == (350, 500)  # 5 x 3.5 inches at 100 dpi


@pytest.mark.parametrize(("case", "message"), [
    ("task", "unknown task"),
    ("group", "--group-size must be >= 2"),
    ("reference", "vocabulary"),
    ("reward", "cannot import"),
    ("algo", "invalid choice"),
])
def test_bad_input_is_one_line_and_a_nonzero_exit(tmp_path: Path, capsys: pytest.CaptureFixture[str], case: str,
                                                 message: str) -> None:
    extra = {"task": ["--task", "builtin:nosuch"], "group": ["--group-size", "1"],
             "reward": ["--reward", "no_such_module_here:f"], "algo": ["--algo", "a2c"]}.get(case, [])
    if case == "reference":
        other = tmp_path / "other"
        (other).mkdir()
        from test_train_support import config as pretrain_config

        cfg = pretrain_config(other / "run", max_steps=1)
        pretrain(cfg.replace(overrides={**cfg.overrides, "vocab_size": 320}))
        extra = ["--reference", str(other / "run")]
    args = rl_args(tmp_path / "bad", "grpo", *extra)
    capsys.readouterr()
    code = main(args)
    err = capsys.readouterr().err.strip()
    assert code != 0 and message in err and len(err.splitlines()) == 1, err
    assert not list_checkpoints(tmp_path / "bad") if (tmp_path / "bad").exists() else True


def test_dynamic_sampling_replaces_groups_whose_rewards_all_agree(tmp_path: Path) -> None:
    run_training(rl_config(tmp_path / "dapo", "dapo", reward="test_rl:varied_reward", oversample=3),
                 stage=RLStage())
    logged = [r for r in rows(tmp_path / "dapo") if "loss" in r]
    assert all(r["informative_frac"] > 0 for r in logged)
    meta = json.loads((list_checkpoints(tmp_path / "dapo")[-1] / "config.json").read_text())
    assert meta["train"]["oversample"] == 3


def test_lora_rl_saves_adapters_that_load_as_a_model(tmp_path: Path) -> None:
    """RL shares the post-training base with SFT: adapter-only checkpoints that name their base, a merged copy."""
    summary = run_training(rl_config(tmp_path / "lora", "grpo", lora_rank=2, max_steps=2), stage=RLStage())
    stored = read_weights(Path(summary.checkpoint))
    assert stored and all("lora_" in name for name in stored)
    loaded = load_model(summary.checkpoint)[0]
    merged = load_model(tmp_path / "lora" / "merged")[0]
    x = torch.randint(0, loaded.config.vocab_size, (1, 10), generator=torch.Generator().manual_seed(0))
    with torch.no_grad():
        assert torch.allclose(loaded(x)[0], merged(x)[0], atol=1e-6)


def test_tokens_per_s_counts_the_rows_the_update_forwards_not_the_context(tmp_path: Path,
                                                                         monkeypatch: pytest.MonkeyPatch) -> None:
    """Rollout rows are prompt + response (a few dozen tokens), not the 256-token context the engine plans:
    counting slots made MFU read above 100% on a real run."""
    import types

    import tinylm.train.loop as loop

    seen: list[int] = []
    original = RLStage.batch_tokens

    def spy(self: RLStage, batch: dict[str, Any]) -> int:
        seen.append(original(self, batch))
        return seen[-1]

    clock = iter(range(10**6))  # the engine's clock ticks one second per reading: every step lasts 1 s
    monkeypatch.setattr(loop, "time", types.SimpleNamespace(perf_counter=lambda: float(next(clock)),
                                                            time=__import__("time").time))
    monkeypatch.setattr(RLStage, "batch_tokens", spy)
    summary = run_training(rl_config(tmp_path / "r", "grpo", max_steps=2, grad_accum=2), stage=RLStage())
    assert len(seen) == 4 and all(0 < n <= 2 * 3 * 40 for n in seen)  # batch 2 x G 3 rows of short prompts
    assert summary.tokens_per_s == pytest.approx(sum(seen) / 2)  # not 2 x 2 x 3 x 256 slots a step
