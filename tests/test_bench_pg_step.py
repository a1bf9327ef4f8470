"""benchmarks/bench_pg_step.py: the policy gradient it steps along, the step itself, and the JSON it prints."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import pytest
import torch

from eval_support import TASK, sft_run
from tinylm.checkpoint import load_model
from tinylm.stages.rl.advantages import EPS
from tinylm.tasks.registry import get_task
from tinylm.tokenizer.chat_format import ChatFormat

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "benchmarks"))
import bench_pg_step  # noqa: E402


class _Parity:
    """The micro model's task with a reward it earns about half the time: a reply of an even number of bytes. (Its
    replies are noise that answers no sum: every group would agree, and the gradient would be zero.)"""

    def __init__(self) -> None:
        self.task = get_task(TASK)

    def examples(self, split: str, n: int, seed: int = 0):
        return self.task.examples(split, n, seed)

    def verify(self, response: str, example) -> bool:
        return len(response.encode()) % 2 == 0


def _setup():
    model, tokenizer, _ = load_model(sft_run())
    model = model.float()
    task = _Parity()
    sampler = bench_pg_step.Sampler(ChatFormat.from_tokenizer(tokenizer), tokenizer, task, group_size=4,
                                    max_new_tokens=4, temperature=1.0)
    return model, sampler, task.examples("train", 6, 0)


def test_the_gradient_is_that_of_the_group_normalised_surrogate_computed_row_by_row() -> None:
    """The same rollouts (the same seeds), the surrogate rebuilt from full-sequence log-softmaxes row by row."""
    model, sampler, problems = _setup()
    got = bench_pg_step.policy_gradient(model, sampler, problems, 1.0, seed=5)
    with torch.no_grad():
        rollouts, rewards = sampler(model, problems, 5)
    grouped = rewards.view(-1, 4)
    advantages = ((grouped - grouped.mean(1, keepdim=True)) / (grouped.std(1, keepdim=True) + EPS)).view(-1)
    model.zero_grad(set_to_none=True)
    total = torch.zeros(())
    for row in range(rollouts.ids.shape[0]):
        ids, mask = rollouts.ids[row], rollouts.response_mask[row]
        logits, _ = model(ids[None])
        logp = torch.log_softmax(logits[0, :-1].float(), dim=-1).gather(-1, ids[1:, None])[:, 0]
        total = total + advantages[row] * (logp * mask).sum() / mask.sum().clamp(min=1)
    (total / rollouts.ids.shape[0]).backward()
    assert rewards.sum() > 0 and advantages.abs().sum() > 0  # some groups disagree: a real gradient
    for name, p in model.named_parameters():
        torch.testing.assert_close(got[name], p.grad, atol=1e-6, rtol=1e-4)


def test_a_step_moves_the_weights_by_eta_and_leaves_the_model_alone() -> None:
    model, _, _ = _setup()
    direction = {name: torch.randn_like(p) for name, p in model.named_parameters()}
    before = {name: p.detach().clone() for name, p in model.named_parameters()}
    moved = bench_pg_step.stepped(model, direction, 0.25)
    distance = torch.sqrt(sum((q.detach() - before[n]).pow(2).sum() for n, q in moved.named_parameters()))
    assert float(distance) == pytest.approx(0.25, rel=1e-4)
    assert all(torch.equal(p, before[n]) for n, p in model.named_parameters())


def test_the_benchmark_prints_every_row(monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]) -> None:
    monkeypatch.setattr(bench_pg_step, "get_task", lambda spec: _Parity())
    monkeypatch.setattr(sys, "argv", ["bench_pg_step.py", "--checkpoint", str(sft_run()), "--task", TASK,
                                      "--prompts", "8", "--eval-prompts", "8", "--group-size", "4",
                                      "--max-new-tokens", "4", "--steps", "0.001,0.1"])
    bench_pg_step.main()
    result = json.loads(capsys.readouterr().out)
    assert [row["eta"] for row in result["steps"]] == [0.001, 0.1]
    for row in result["steps"]:
        for side in ("along_gradient", "along_random"):
            assert set(row[side]) == {"held_out", "gradient_problems"}
            assert all(0.0 <= v <= 1.0 for v in row[side].values())
    assert result["gradient_norm"] > 0 and len(result["largest_gradient_tensors"]) == 5


def test_a_zero_gradient_is_one_line(monkeypatch: pytest.MonkeyPatch) -> None:
    """With the real sums the micro model earns nothing: every group agrees, and there is nothing to step along."""
    monkeypatch.setattr(sys, "argv", ["bench_pg_step.py", "--checkpoint", str(sft_run()), "--task", TASK,
                                      "--prompts", "4", "--eval-prompts", "4", "--group-size", "2"])
    with pytest.raises(SystemExit) as exc:
        bench_pg_step.main()
    assert "the gradient is zero" in str(exc.value) and "\n" not in str(exc.value)


def test_a_missing_checkpoint_is_one_line(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    monkeypatch.setattr(sys, "argv", ["bench_pg_step.py", "--checkpoint", str(tmp_path / "nope"), "--task", TASK])
    with pytest.raises(SystemExit) as exc:
        bench_pg_step.main()
    assert str(exc.value).startswith("bench_pg_step: ") and "\n" not in str(exc.value)
