"""`tinylm reward` end to end: the Bradley-Terry loss proved on numbers, the stage learns to rank, accumulation
and torchrun equal one big batch, the checkpoint loads back and exports to transformers with equal scores."""

from __future__ import annotations

import atexit
import functools
import json
import math
import shutil
import tempfile
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import torch

from test_ddp import torchrun
from test_sft import TASK, base_run, sft_args
from test_train_support import losses, rows
from tinylm.checkpoint import list_checkpoints, read_weights
from tinylm.cli.main import main
from tinylm.models.reward_model import bradley_terry_loss, pair_scores
from tinylm.runtime.distributed import DistEnv
from tinylm.stages.preference.config import RewardConfig
from tinylm.stages.preference.reward import RewardStage, load_reward_model, score_answers
from tinylm.train.loop import run_training
from tinylm.train.stage import StageContext
from tinylm.train.step import accumulate_gradients

pytestmark = pytest.mark.usefixtures("one_thread")


def reward_config(out: Path, **changes: Any) -> RewardConfig:
    base: dict[str, Any] = dict(base=str(base_run()), data=TASK, out=str(out), batch_size=4, seq_len=32,
                                max_steps=4, warmup_steps=1, log_every=1, eval_every=2, train_examples=48,
                                eval_examples=8, progress=False, seed=3, threads=1, lr=3e-3,
                                dtype="fp32", attention="sdpa")  # "auto" may pick bf16 or a kernel, by a timing
    base.update(changes)
    return RewardConfig(**base)


def reward_args(out: Path, *extra: str) -> list[str]:
    return ["reward", "--base", str(base_run()), "--data", TASK, "--out", str(out), "--batch-size", "4",
            "--seq-len", "32", "--warmup-steps", "1", "--log-every", "1", "--eval-every", "2",
            "--train-examples", "48", "--eval-examples", "8", "--no-progress", "--seed", "3", "--threads", "1",
            "--lr", "0.003", "--dtype", "fp32", *extra]


def test_bradley_terry_closed_form_numpy_and_gradcheck() -> None:
    g = torch.Generator().manual_seed(0)
    chosen, rejected = (torch.randn(7, generator=g, dtype=torch.float64, requires_grad=True) for _ in range(2))
    same = bradley_terry_loss(chosen.detach(), chosen.detach())
    np.testing.assert_allclose(same.numpy(), math.log(2.0), rtol=0, atol=1e-12)  # no preference: ln 2
    np.testing.assert_allclose(bradley_terry_loss(chosen.detach(), chosen.detach(), 0.5).numpy(),
                               math.log1p(math.exp(0.5)), rtol=0, atol=1e-12)
    delta = (chosen - rejected).detach().numpy()
    np.testing.assert_allclose(bradley_terry_loss(chosen, rejected, 0.3).detach().numpy(),
                               np.logaddexp(0.0, -(delta - 0.3)), rtol=0, atol=1e-10)
    assert torch.autograd.gradcheck(lambda a, b: bradley_terry_loss(a, b, 0.3), (chosen, rejected))


def test_reward_trains_logs_and_records_its_lineage(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(reward_args(tmp_path / "rm", "--max-steps", "4", "--margin", "0.2")) == 0
    assert "held-out preference accuracy" in capsys.readouterr().out
    steps = [r for r in rows(tmp_path / "rm") if "loss" in r]
    assert all(k in r for r in steps for k in ("score_chosen", "score_rejected", "reward_margin", "reward_accuracy"))
    evals = [r for r in rows(tmp_path / "rm") if "dev_accuracy" in r]
    assert [r["step"] for r in evals] == [0, 2, 4]
    meta = json.loads((list_checkpoints(tmp_path / "rm")[-1] / "config.json").read_text())
    assert meta["stage"] == "reward" and meta["reward_head"] == "score" and meta["margin"] == 0.2
    assert [link["stage"] for link in meta["lineage"]] == ["pretrain", "reward"]


def test_reward_model_learns_to_rank_a_fixed_batch(tmp_path: Path) -> None:
    run_training(reward_config(tmp_path / "rm", max_steps=10, eval_every=0, lr=1e-2, batch_size=8,
                               train_examples=8), stage=RewardStage())
    steps = [r for r in rows(tmp_path / "rm") if "loss" in r]
    assert steps[-1]["loss"] < 0.7 * steps[0]["loss"] and steps[-1]["reward_accuracy"] == 1.0


def ready_stage(out: Path, **changes: Any) -> tuple[RewardStage, torch.nn.Module]:
    stage = RewardStage()
    stage.setup(StageContext(cfg=reward_config(out, **changes), env=DistEnv(), device=torch.device("cpu"),
                             dtype=torch.float32, run_dir=out, resume=None, start_from=None, say=lambda line: None))
    return stage, stage.build_model()


def test_accumulating_micro_batches_equals_one_big_batch(tmp_path: Path) -> None:
    stage, model = ready_stage(tmp_path / "rm", batch_size=6, margin=0.1)
    big = stage.next_batch()
    micro = [{k: v[i:i + 3] for k, v in big.items()} for i in (0, 3)]
    cpu = torch.device("cpu")
    grads = []
    for batches in ([big], micro):
        accumulate_gradients(model, batches, stage.loss, 6, 1, cpu, torch.float32)
        grads.append([p.grad.clone() for p in model.parameters() if p.grad is not None])
        model.zero_grad(set_to_none=True)
    assert grads[0] and all(torch.allclose(a, b, atol=1e-6, rtol=0) for a, b in zip(*grads, strict=True))
    assert model.backbone.lm_head.weight.grad is None or model.config.tie_embeddings  # the LM head is not used


@pytest.mark.slow  # ~7 s; the loop's DDP is in the default suite through SFT, DPO and RL
def test_torchrun_two_processes_equal_one(tmp_path: Path) -> None:
    run_training(reward_config(tmp_path / "single", batch_size=4), stage=RewardStage())
    result = torchrun(*reward_args(tmp_path / "ddp", "--batch-size", "2", "--max-steps", "4"))
    assert result.returncode == 0, result.stderr[-3000:]
    assert losses(tmp_path / "ddp") == pytest.approx(losses(tmp_path / "single"), abs=1e-5)


def test_checkpoint_loads_back_and_exports_to_transformers_with_equal_scores(tmp_path: Path) -> None:
    transformers = pytest.importorskip("transformers")
    from tinylm.cli.main import main

    summary = run_training(reward_config(tmp_path / "rm", max_steps=3), stage=RewardStage())
    model, tokenizer, _ = load_reward_model(summary.checkpoint)
    stage, _ = ready_stage(tmp_path / "again")
    batch = {k: v[:6] for k, v in stage.dev_rows.tensors.items()}
    with torch.no_grad():
        chosen, rejected = pair_scores(model, batch)
    out = tmp_path / "hf"  # `tinylm export` sees the reward head and writes a sequence classifier
    assert main(["export", "--checkpoint", str(summary.checkpoint), "--out", str(out)]) == 0
    hf = transformers.AutoModelForSequenceClassification.from_pretrained(out, dtype=torch.float32).eval()
    assert type(hf).__name__.endswith("ForSequenceClassification")
    with torch.no_grad():
        theirs = hf(input_ids=batch["chosen_ids"]).logits.squeeze(-1)  # right padding = the pad token
    torch.testing.assert_close(theirs, chosen, atol=1e-5, rtol=0)
    assert float((chosen - rejected).abs().max()) > 0  # the sides score differently
    dev = stage._pairs(stage.ctx.cfg)[1][:6]  # the same pairs as text: what RL scores its rollouts with
    scored = score_answers(model, stage.chat, [list(r.prompt) for r in dev], [r.chosen for r in dev])
    torch.testing.assert_close(scored, chosen, atol=1e-5, rtol=0)


def test_a_lora_reward_run_loads_exports_and_rewards_rl_as_the_model_that_trained(tmp_path: Path) -> None:
    """`tinylm reward --lora-rank`: the checkpoint holds adapters and the head only; it loads (adapters merged into
    its base) scoring as the adapter model that trained, exports to transformers with equal scores (1e-5), and
    serves as RL's reward model."""
    transformers = pytest.importorskip("transformers")
    from test_rl import rl_config
    from tinylm.models.lora import lora_modules
    from tinylm.stages.rl.stage import RLStage

    summary = run_training(reward_config(tmp_path / "rm", max_steps=3, lora_rank=2, compile="off"), stage=RewardStage())
    ckpt = Path(summary.checkpoint)
    stored = read_weights(ckpt)
    assert "score.weight" in stored and any(k.endswith(".lora_B") for k in stored)
    assert not any(k.endswith("proj.weight") for k in stored)  # adapter-only: the base is named, not copied
    stage = RewardStage()  # the model as the run held it: the base, unmerged adapters and head, from the checkpoint
    stage.setup(StageContext(cfg=reward_config(tmp_path / "again", lora_rank=2, compile="off"), env=DistEnv(),
                             device=torch.device("cpu"), dtype=torch.float32, run_dir=tmp_path / "again",
                             resume=ckpt, start_from=None, say=lambda line: None))
    trained = stage.build_model().eval()
    loaded, _, meta = load_reward_model(ckpt)
    assert list(lora_modules(trained)) and not list(lora_modules(loaded)) and "reward_adapter" in meta
    assert any(float(p.abs().max()) > 0 for k, p in stored.items() if k.endswith(".lora_B"))  # the adapters moved
    batch = {k: v[:6] for k, v in stage.dev_rows.tensors.items()}
    with torch.no_grad():
        chosen, rejected = pair_scores(loaded, batch)
        for ours, theirs in zip(pair_scores(trained, batch), (chosen, rejected), strict=True):
            torch.testing.assert_close(theirs, ours, atol=1e-5, rtol=0)
    assert float((chosen - rejected).abs().max()) > 0

    out = tmp_path / "hf"
    assert main(["export", "--checkpoint", str(ckpt), "--out", str(out)]) == 0
    hf = transformers.AutoModelForSequenceClassification.from_pretrained(out, dtype=torch.float32).eval()
    with torch.no_grad():
        exported = hf(input_ids=batch["chosen_ids"]).logits.squeeze(-1)
    torch.testing.assert_close(exported, chosen, atol=1e-5, rtol=0)

    run_training(rl_config(tmp_path / "rl", "grpo", max_steps=1, reward=f"model:{ckpt}"), stage=RLStage())
    logged = [r for r in rows(tmp_path / "rl") if "reward" in r]
    assert logged and all(r["reward_failures"] == 0 and math.isfinite(r["reward"]) for r in logged)
    assert all(r["reward"] != round(r["reward"] * 6) / 6 for r in logged)  # real-valued scores, not a 0/1 verifier


def test_bad_input_is_one_line(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(reward_args(tmp_path / "out", "--max-steps", "1", "--margin", "-1")) == 1
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "--margin must be >= 0" in err[0]
    assert not list_checkpoints(tmp_path / "out")


@functools.lru_cache(maxsize=1)
def reward_run() -> Path:
    """A reward run trained for one step, shared by the refusal tests (they only read it)."""
    out = Path(tempfile.mkdtemp(prefix="tinylm-reward-run-")) / "rm"
    atexit.register(shutil.rmtree, out.parent, ignore_errors=True)
    run_training(reward_config(out, max_steps=1, eval_every=0), stage=RewardStage())
    return out


@pytest.mark.parametrize("command", [
    ["eval", "--tasks", TASK], ["chat"], ["generate", "--prompt", "hi"], ["serve", "--threads", "1"], ["sft"],
])
def test_a_reward_model_where_a_language_model_is_expected_is_named_for_what_it_is(
        tmp_path: Path, capsys: pytest.CaptureFixture[str], command: list[str]) -> None:
    run = reward_run()
    capsys.readouterr()  # what training it printed
    args = ["sft", *sft_args(tmp_path / "sft")[1:]] if command == ["sft"] else [*command, "--checkpoint", str(run)]
    if command == ["sft"]:
        args[args.index("--base") + 1] = str(run)
    assert main(args) == 1
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1, err
    assert "corrupt" not in err[0] and "is a reward model (a `tinylm reward` checkpoint)" in err[0]
    assert "--reward model:" in err[0] and "tinylm export" in err[0]


def test_reward_on_unpaired_rows_points_to_dpo_kto(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    data = tmp_path / "kto.jsonl"
    data.write_text("".join(json.dumps({"prompt": f"What is {a} + 1?", "completion": str(a + 1), "label": True})
                            + "\n" for a in range(8)), encoding="utf-8")
    args = reward_args(tmp_path / "rm", "--max-steps", "1")
    args[args.index("--data") + 1] = str(data)
    assert main(args) == 1
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "tinylm dpo --loss kto" in err[0] and "needs pairs" in err[0]
    assert "only --loss kto" not in err[0]
