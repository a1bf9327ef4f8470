"""`tinylm dpo` end to end on a micro SFT-less base: it starts at the closed form, logs what it should, the
three reference modes agree, accumulation and torchrun equal one big batch, it resumes bit-exactly, and
bad input is one line."""

from __future__ import annotations

import json
import math
import shutil
from pathlib import Path
from typing import Any

import pytest
import torch

from test_ddp import torchrun
from test_sft import TASK, base_run
from test_train_support import losses, rows
from tinylm.checkpoint import list_checkpoints, load_model
from tinylm.cli.main import main
from tinylm.runtime.distributed import DistEnv
from tinylm.stages.preference.config import DPOConfig
from tinylm.stages.preference.dpo import DPOStage
from tinylm.stages.preference.kto_step import REFERENCE_POINT
from tinylm.stages.preference.losses import LOSSES, kto_ratio_sums, kto_reference_point
from tinylm.stages.preference.sequence_logprobs import pair_logprobs
from tinylm.train.loop import run_training
from tinylm.train.stage import StageContext
from tinylm.train.step import accumulate_gradients

pytestmark = pytest.mark.usefixtures("one_thread")

STEP_METRICS = ("loss", "reward_chosen", "reward_rejected", "reward_margin", "reward_accuracy", "logp_chosen",
                "logp_rejected")


def dpo_config(out: Path, **changes: Any) -> DPOConfig:
    base: dict[str, Any] = dict(base=str(base_run()), data=TASK, out=str(out), batch_size=4, seq_len=32,
                                max_steps=4, warmup_steps=1, log_every=1, eval_every=2, train_examples=48,
                                eval_examples=8, max_new_tokens=4, progress=False, seed=3, threads=1, lr=3e-3,
                                dtype="fp32")  # "auto" may pick bf16 on a CPU, by a timing
    base.update(changes)
    return DPOConfig(**base)


def dpo_args(out: Path, *extra: str) -> list[str]:
    return ["dpo", "--base", str(base_run()), "--data", TASK, "--out", str(out), "--batch-size", "4",
            "--seq-len", "32", "--warmup-steps", "1", "--log-every", "1", "--eval-every", "2",
            "--train-examples", "48", "--eval-examples", "8", "--max-new-tokens", "4", "--no-progress",
            "--seed", "3", "--threads", "1", "--lr", "0.003", "--dtype", "fp32", *extra]


def step_rows(run: Path) -> list[dict[str, Any]]:
    return [r for r in rows(run) if "loss" in r]


def test_dpo_starts_at_ln2_logs_every_metric_and_records_its_lineage(tmp_path: Path,
                                                                   capsys: pytest.CaptureFixture[str]) -> None:
    assert main(dpo_args(tmp_path / "dpo", "--max-steps", "4")) == 0
    out = capsys.readouterr().out
    assert "held-out preference accuracy" in out and "held-out exact-match" in out
    steps = step_rows(tmp_path / "dpo")
    assert [r["step"] for r in steps] == [1, 2, 3, 4]
    assert all(key in r for r in steps for key in STEP_METRICS)
    assert steps[0]["loss"] == pytest.approx(math.log(2), abs=1e-5)  # pi = pi_ref before the first update
    assert steps[0]["reward_margin"] == pytest.approx(0.0, abs=1e-5)
    evals = [r for r in rows(tmp_path / "dpo") if "dev_accuracy" in r]
    assert [r["step"] for r in evals] == [0, 2, 4]
    assert evals[0]["dev_loss"] == pytest.approx(math.log(2), abs=1e-5)
    assert all(0 <= r["exact_match"] <= 1 for r in evals)
    assert evals[-1]["dev_margin"] != evals[0]["dev_margin"] and 0 <= evals[0]["dev_logp_accuracy"] <= 1
    meta = json.loads((list_checkpoints(tmp_path / "dpo")[-1] / "config.json").read_text())
    assert meta["stage"] == "dpo" and meta["preference_loss"] == {"name": "dpo", "beta": 0.1}
    assert [link["stage"] for link in meta["lineage"]] == ["pretrain", "dpo"]


@pytest.mark.parametrize("name", list(LOSSES))
def test_every_loss_learns_to_prefer_the_verified_answers_of_a_fixed_batch(tmp_path: Path, name: str) -> None:
    """Eight pairs, full-batch steps: each loss lowers itself and ranks the chosen answers first."""
    run_training(dpo_config(tmp_path / name, loss=name, max_steps=10, eval_every=0, lr=1e-2, batch_size=8,
                            train_examples=8), stage=DPOStage())
    steps = step_rows(tmp_path / name)
    assert steps[-1]["loss"] < 0.9 * steps[0]["loss"]
    assert steps[-1]["reward_accuracy"] >= 0.75 and steps[-1]["reward_margin"] > steps[0]["reward_margin"]


def test_the_three_reference_modes_give_the_same_run(tmp_path: Path) -> None:
    """Cached log-probs = a frozen copy, and with LoRA the adapters-off base = a frozen copy of the base."""
    runs = {"cached": dict(reference="cached"), "copy": dict(reference="copy"),
            "lora_adapters": dict(reference="adapters", lora_rank=2), "lora_copy": dict(reference="copy", lora_rank=2)}
    for name, changes in runs.items():
        run_training(dpo_config(tmp_path / name, max_steps=3, eval_every=3, **changes), stage=DPOStage())
    assert losses(tmp_path / "cached") == pytest.approx(losses(tmp_path / "copy"), abs=1e-5)
    assert losses(tmp_path / "lora_adapters") == pytest.approx(losses(tmp_path / "lora_copy"), abs=1e-5)
    assert losses(tmp_path / "lora_adapters") != pytest.approx(losses(tmp_path / "cached"), abs=1e-5)
    merged = load_model(tmp_path / "lora_adapters" / "merged")[0]  # the LoRA run leaves a self-contained copy
    assert merged.config.vocab_size == load_model(base_run())[0].config.vocab_size


def ready_stage(out: Path, **changes: Any) -> tuple[DPOStage, torch.nn.Module]:
    """A set-up stage and its policy, as the engine would have them before step 1."""
    cfg = dpo_config(out, **changes)
    stage = DPOStage()
    stage.setup(StageContext(cfg=cfg, env=DistEnv(), device=torch.device("cpu"), dtype=torch.float32,
                             run_dir=out, resume=None, start_from=None, say=lambda line: None))
    return stage, stage.build_model()


def gradients(model: torch.nn.Module) -> list[torch.Tensor]:
    grads = [p.grad.clone() for p in model.parameters() if p.grad is not None]
    model.zero_grad(set_to_none=True)
    return grads


def mixed_kto_rows(path: Path) -> Path:
    """Pairs and one-sided rows of both labels: KTO's micro-batches then hold different numbers of sides."""
    lines: list[Any] = []
    for a in range(40):
        prompt = f"What is {a} + 1?"
        lines.append({"prompt": prompt, "chosen": str(a + 1), "rejected": str(a + 2)} if a % 3 == 0 else
                     {"prompt": prompt, "completion": str(a + 1 + (a % 2)), "label": a % 2 == 0})
    return _write(path, lines)


def move_away_from_the_reference(model: torch.nn.Module, batch: dict[str, torch.Tensor], up: bool) -> None:
    """Noise on every weight, so every log-ratio is live; with `up`, then one small step up the answers'
    likelihood, so KTO's z_0 (the log-ratios' mean, clamped at 0) is positive rather than clamped."""
    torch.manual_seed(0)
    with torch.no_grad():
        for p in model.parameters():
            p.add_(torch.randn_like(p) * 0.02)
    if not up:
        return
    chosen, rejected, _, _ = pair_logprobs(model, batch)
    ((chosen * batch["chosen_present"]).sum() + (rejected * batch["rejected_present"]).sum()).backward()
    with torch.no_grad():
        for p in model.parameters():
            if p.grad is not None:
                p.add_(p.grad * 0.002)
    model.zero_grad(set_to_none=True)


@pytest.mark.parametrize("name", [*LOSSES, "kto_unpaired"])
def test_accumulating_micro_batches_equals_one_big_batch(tmp_path: Path, name: str) -> None:
    """At pi != pi_ref, for every loss: KTO's z_0 is the step's (DPOStage.begin_step), not each micro-batch's."""
    data = {"data": str(mixed_kto_rows(tmp_path / "rows.jsonl"))} if name == "kto_unpaired" else {}
    loss = name.removesuffix("_unpaired")
    stage, model = ready_stage(tmp_path / name, loss=loss, batch_size=6, **data)
    big = stage.next_batch()
    micro = [{k: v[i:i + 2] for k, v in big.items()} for i in (0, 2, 4)]
    move_away_from_the_reference(model, big, up=loss == "kto")
    cpu = torch.device("cpu")
    stage.begin_step(model, [big])  # what the engine does before a step's first backward
    one, _ = accumulate_gradients(model, [big], stage.loss, 6, 1, cpu, torch.float32)
    g_one = gradients(model)
    stage.begin_step(model, micro)
    three, _ = accumulate_gradients(model, micro, stage.loss, 6, 1, cpu, torch.float32)
    g_three = gradients(model)
    # the summed loss is up to ~40 for the NLL losses (CPO, RPO, ORPO): float32 sums agree to ~1e-7 relative
    assert float(three) == pytest.approx(float(one), rel=1e-6, abs=1e-6)
    assert g_one and all(torch.allclose(a, b, atol=1e-6, rtol=0) for a, b in zip(g_one, g_three, strict=True))
    assert any(float(g.abs().max()) > 1e-4 for g in g_one)  # there is a gradient to compare
    if loss == "kto":
        z0 = float(big[REFERENCE_POINT])
        assert z0 > 1e-3 and all(float(b[REFERENCE_POINT]) == pytest.approx(z0, abs=1e-9) for b in micro)
        with torch.no_grad():  # each micro-batch's own z_0 (trl's per-batch estimate) would have differed
            own = [float(kto_reference_point(kto_ratio_sums(stage.pair_logps(model, b)))) for b in micro]
        assert max(abs(z - z0) for z in own) > 1e-3, own
        if name == "kto_unpaired":
            assert 0 < float(big["chosen_present"].sum() + big["rejected_present"].sum()) < 12  # one-sided rows


@pytest.mark.parametrize("name", ["dpo", "kto"])
def test_grad_accum_run_equals_the_big_batch_run(tmp_path: Path, name: str) -> None:
    run_training(dpo_config(tmp_path / "big", loss=name, batch_size=4), stage=DPOStage())
    run_training(dpo_config(tmp_path / "accum", loss=name, batch_size=2, grad_accum=2), stage=DPOStage())
    assert losses(tmp_path / "accum") == pytest.approx(losses(tmp_path / "big"), abs=1e-6)


@pytest.mark.parametrize("name", ["dpo", pytest.param("kto", marks=pytest.mark.slow)])  # kto: the same loop
def test_torchrun_two_processes_equal_one(tmp_path: Path, name: str) -> None:
    run_training(dpo_config(tmp_path / "single", loss=name, batch_size=4), stage=DPOStage())
    result = torchrun(*dpo_args(tmp_path / "ddp", "--batch-size", "2", "--max-steps", "4", "--loss", name))
    assert result.returncode == 0, result.stderr[-3000:]
    assert losses(tmp_path / "ddp") == pytest.approx(losses(tmp_path / "single"), abs=1e-5)
    dev = [[r["dev_margin"] for r in rows(tmp_path / run) if "dev_margin" in r] for run in ("single", "ddp")]
    assert dev[0] == pytest.approx(dev[1], abs=1e-5)
    if name == "kto":  # the step's z_0 and the held-out loss (the held-out set's z_0) agree too
        for key in ("kto_z0", "dev_loss"):
            got = [[r[key] for r in rows(tmp_path / run) if key in r] for run in ("single", "ddp")]
            assert got[0] and got[0] == pytest.approx(got[1], abs=1e-5)


def test_dpo_resume_is_bit_exact(tmp_path: Path) -> None:
    run_training(dpo_config(tmp_path / "straight", schedule_steps=4), stage=DPOStage())
    run_training(dpo_config(tmp_path / "split", max_steps=2, schedule_steps=4), stage=DPOStage())
    run_training(dpo_config(tmp_path / "split", schedule_steps=4, resume="latest"), stage=DPOStage())
    assert losses(tmp_path / "split") == losses(tmp_path / "straight")


def _write(path: Path, lines: list[Any]) -> Path:
    path.write_text("".join((x if isinstance(x, str) else json.dumps(x)) + "\n" for x in lines), encoding="utf-8")
    return path


def test_kto_learns_from_unpaired_rows_and_pair_losses_refuse_them(tmp_path: Path,
                                                                 capsys: pytest.CaptureFixture[str]) -> None:
    unpaired = [{"prompt": f"What is {a} + 1?", "completion": str(a + 1 + (a % 2)), "label": a % 2 == 0}
                for a in range(40)]
    data = _write(tmp_path / "kto.jsonl", unpaired)
    args = dpo_args(tmp_path / "kto", "--max-steps", "2", "--loss", "kto")
    args[args.index("--data") + 1] = str(data)
    assert main(args) == 0
    assert step_rows(tmp_path / "kto")[0]["loss"] == pytest.approx(0.5, abs=1e-5)  # one side per row: 1 - sigmoid(0)
    args = dpo_args(tmp_path / "dpo", "--max-steps", "1")
    args[args.index("--data") + 1] = str(data)
    assert main(args) == 1
    assert "only --loss kto learns from unpaired" in capsys.readouterr().err


@pytest.mark.parametrize(("case", "message"), [
    ("unknown_loss", "unknown --loss 'dpoo'"),
    ("beta_zero", "--beta must be > 0"),
    ("beta_negative", "--beta must be > 0"),
    ("identical", "bad.jsonl:2: chosen and rejected are identical"),
    ("empty_side", "bad.jsonl:1: the rejected answer is empty"),
    ("ref_vocab", "does not match the policy's vocabulary"),
    ("adapters_without_lora", "--reference adapters needs LoRA"),
])
def test_bad_input_is_one_line_and_writes_nothing(tmp_path: Path, capsys: pytest.CaptureFixture[str], case: str,
                                                  message: str) -> None:
    args = dpo_args(tmp_path / "out", "--max-steps", "1")
    bad = tmp_path / "bad.jsonl"
    good = {"prompt": "What is 1 + 1?", "chosen": "2", "rejected": "3"}
    if case == "unknown_loss":
        args += ["--loss", "dpoo"]
    elif case == "beta_zero":
        args += ["--beta", "0"]
    elif case == "beta_negative":
        args += ["--beta", "-0.1"]
    elif case == "identical":
        args[args.index("--data") + 1] = str(_write(bad, [good, {**good, "rejected": "2"}]))
    elif case == "empty_side":
        args[args.index("--data") + 1] = str(_write(bad, [{**good, "rejected": ""}]))
    elif case == "ref_vocab":
        args += ["--ref", str(_reference_with_another_vocabulary(tmp_path))]
    elif case == "adapters_without_lora":
        args += ["--reference", "adapters"]
    assert main(args) == 1
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and err[0].startswith("tinylm: error:") and message in err[0], err
    assert not list_checkpoints(tmp_path / "out")


def _reference_with_another_vocabulary(tmp_path: Path) -> Path:
    from tinylm.checkpoint import save_checkpoint
    from tinylm.models.factory import build_model

    model, _, meta = load_model(base_run())
    config = model.config.replace(vocab_size=model.config.vocab_size + 8)
    ref = save_checkpoint(tmp_path / "ref", 1, build_model(config), config,
                          tokenizer_file=Path(meta["path"]) / "tokenizer.json")
    shutil.copyfile(Path(meta["path"]) / "tokenizer.json", ref / "tokenizer.json")
    return ref


def test_kto_on_unpaired_rows_reports_no_pair_accuracy(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """Unpaired rows have no pairs to rank: the closing line gives KTO's own measure, not a pair accuracy of 0%."""
    unpaired = [{"prompt": f"What is {a} + 1?", "completion": str(a + 1 + (a % 2)), "label": a % 2 == 0}
                for a in range(40)]
    args = dpo_args(tmp_path / "kto", "--max-steps", "2", "--loss", "kto")
    args[args.index("--data") + 1] = str(_write(tmp_path / "kto.jsonl", unpaired))
    assert main(args) == 0
    done = next(line for line in capsys.readouterr().out.splitlines() if line.startswith("done:"))
    assert "preference accuracy" not in done and "mean margin" not in done and "chosen likelier" not in done
    assert "on their label's side" in done
    evals = [r for r in rows(tmp_path / "kto") if "dev_loss" in r]
    assert evals and not any(k in r for r in evals for k in ("dev_accuracy", "dev_margin", "dev_logp_accuracy"))
    assert all(0 <= r["dev_label_accuracy"] <= 1 for r in evals)


def test_kto_pair_scores_of_mixed_rows_count_the_pairs_alone(tmp_path: Path) -> None:
    stage, model = ready_stage(tmp_path / "mixed", loss="kto", data=str(mixed_kto_rows(tmp_path / "rows.jsonl")),
                               dev_fraction=0.5)
    batch = stage.next_batch()
    move_away_from_the_reference(model, batch, up=True)
    scores = stage.held_out_scores(model)
    with torch.no_grad():
        p = [stage.pair_logps(model, b) for b in stage.dev_batches()]
    paired = torch.cat([(x.chosen_present * x.rejected_present).bool() for x in p])
    chosen_likelier = torch.cat([x.chosen > x.rejected for x in p])
    assert 0 < int(paired.sum()) < len(paired)
    assert scores["dev_logp_accuracy"] == pytest.approx(float(chosen_likelier[paired].double().mean()), abs=1e-9)
    assert 0 <= scores["dev_accuracy"] <= 1 and 0 <= scores["dev_label_accuracy"] <= 1
