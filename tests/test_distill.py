"""`tinylm distill` end to end on micro models: the student learns the teacher's distributions, the teacher stays
frozen, a resumed run (on-policy batches included) equals the straight one, the logit cache round-trips and is
read without the teacher, sequence-level answers become SFT data, on-policy samples are scored exactly, and bad
input is one line."""

from __future__ import annotations

import atexit
import functools
import json
import shutil
import sys
import tempfile
from pathlib import Path
from typing import Any

import pytest
import torch
from safetensors.torch import load_file

from test_reward import reward_run
from test_sft import TASK, base_run, sft_config
from test_train_support import MICRO, data_dir, losses, rows
from test_train_support import config as pretrain_config
from tinylm.checkpoint import list_checkpoints, load_model, save_checkpoint
from tinylm.cli.main import main
from tinylm.config import ModelConfig
from tinylm.data.packing import IGNORE
from tinylm.models.factory import build_model
from tinylm.stages.distill import setup as distill_setup
from tinylm.stages.distill import teacher as distill_teacher
from tinylm.stages.distill.config import DistillConfig
from tinylm.stages.distill.divergences import top_k_of
from tinylm.stages.distill.on_policy import on_policy_draw, sample_batch
from tinylm.stages.distill.stage import DistillStage
from tinylm.stages.pretrain import pretrain
from tinylm.stages.rl.rollout import policy_logprobs
from tinylm.stages.sft.stage import SFTStage
from tinylm.tokenizer import train_bpe
from tinylm.train.loop import run_training

pytestmark = pytest.mark.usefixtures("one_thread")

STUDENT = {"n_embed": 16, "n_head": 2, "n_blocks": 1, "n_kv_head": 1, "context_length": 32}


@functools.lru_cache(maxsize=1)
def teacher_run() -> Path:
    """A micro model pretrained long enough to know something the student's initialisation does not."""
    root = Path(tempfile.mkdtemp(prefix="tinylm-distill-teacher-"))
    atexit.register(shutil.rmtree, root, ignore_errors=True)
    pretrain(pretrain_config(root / "teacher", max_steps=40, optimizer="adamw", lr=3e-3, seq_len_warmup_steps=0,
                             overrides={**MICRO, "n_embed": 48, "n_head": 4, "n_kv_head": 2, "n_blocks": 2}))
    return root / "teacher"


@functools.lru_cache(maxsize=1)
def chat_teacher() -> Path:
    """An SFT run on the arithmetic task: a teacher that speaks the chat format."""
    root = Path(tempfile.mkdtemp(prefix="tinylm-distill-chat-"))
    atexit.register(shutil.rmtree, root, ignore_errors=True)
    run_training(sft_config(root / "sft", max_steps=20, eval_every=0), stage=SFTStage())
    return root / "sft"


def distill_config(out: Path, **changes: Any) -> DistillConfig:
    base: dict[str, Any] = dict(teacher=str(teacher_run()), overrides=dict(STUDENT), out=str(out), batch_size=4,
                                seq_len=16, max_steps=6, warmup_steps=1, log_every=1, eval_every=3, eval_batches=2,
                                progress=False, seed=3, threads=1, dtype="fp32", compile="off", attention="sdpa",
                                optimizer="adamw", lr=3e-3)
    base.update(changes)
    return DistillConfig(**base)


def distill_args(out: Path, *extra: str) -> list[str]:
    shape = [a for name, value in STUDENT.items() for a in ("--set", f"{name}={value}")]
    return ["distill", "--teacher", str(teacher_run()), *shape, "--out", str(out), "--batch-size", "4",
            "--seq-len", "16", "--max-steps", "2", "--log-every", "1", "--eval-every", "0", "--eval-batches", "2",
            "--no-progress", "--seed", "3", "--threads", "1", "--dtype", "fp32", "--compile", "off",
            "--attention", "sdpa", *extra]


def test_the_student_learns_the_teachers_distributions(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(distill_args(tmp_path / "kd", "--max-steps", "30", "--eval-every", "15", "--ce-weight", "0",
                             "--optimizer", "adamw", "--lr", "0.01", "--warmup-steps", "2")) == 0
    printed = capsys.readouterr()
    assert "forward KL(teacher || student)" in printed.err and "held-out divergence to the teacher" in printed.out
    logged = rows(tmp_path / "kd")
    evals = [r for r in logged if "dev_divergence" in r]
    assert [r["step"] for r in evals] == [0, 15, 30]
    assert evals[-1]["dev_divergence"] < 0.7 * evals[0]["dev_divergence"]
    assert evals[-1]["dev_agreement"] > evals[0]["dev_agreement"]
    assert all({"dev_bpb", "dev_loss"} <= set(r) for r in evals)
    steps = [r for r in logged if "loss" in r]
    assert all({"divergence", "ce", "agreement", "on_policy"} <= set(r) for r in steps)
    # --ce-weight 0: the loss is the divergence alone
    assert all(r["loss"] == pytest.approx(r["divergence"], rel=1e-5) for r in steps)
    meta = json.loads((list_checkpoints(tmp_path / "kd")[-1] / "config.json").read_text())
    assert meta["stage"] == "distill" and meta["distill"]["divergence"] == "forward_kl"
    assert meta["teacher"] == str(list_checkpoints(teacher_run())[-1])
    assert meta["lineage"][-1]["stage"] == "distill"


def test_the_loss_mixes_divergence_and_cross_entropy_by_the_weight(tmp_path: Path) -> None:
    run_training(distill_config(tmp_path / "mix", max_steps=3, ce_weight=0.3, divergence="jsd", beta=0.2,
                                temperature=2.0), stage=DistillStage())
    for r in (r for r in rows(tmp_path / "mix") if "loss" in r):
        assert r["loss"] == pytest.approx(0.7 * r["divergence"] + 0.3 * r["ce"], rel=1e-5)


def test_the_teacher_is_frozen_in_eval_mode_and_gets_no_gradient(tmp_path: Path,
                                                                 monkeypatch: pytest.MonkeyPatch) -> None:
    loaded: list[torch.nn.Module] = []
    real = distill_setup.load_teacher

    def keep(*args: Any) -> torch.nn.Module:
        loaded.append(real(*args))
        return loaded[-1]

    monkeypatch.setattr(distill_setup, "load_teacher", keep)
    before = {k: v.clone() for k, v in load_model(teacher_run())[0].state_dict().items()}
    run_training(distill_config(tmp_path / "frozen", max_steps=3, on_policy=0.5, max_new_tokens=4),
                 stage=DistillStage())
    (teacher,) = loaded
    assert not teacher.training
    assert all(not p.requires_grad and p.grad is None for p in teacher.parameters())
    assert all(torch.equal(before[k], v) for k, v in teacher.state_dict().items())


def test_resume_is_bit_exact_with_on_policy_batches(tmp_path: Path) -> None:
    mixed = dict(on_policy=0.5, max_new_tokens=4, schedule_steps=6, eval_every=0)
    assert any(on_policy_draw(3, step, 0, 0.5) for step in range(6))  # some steps sample, some read the data
    assert not all(on_policy_draw(3, step, 0, 0.5) for step in range(6))
    run_training(distill_config(tmp_path / "straight", **mixed), stage=DistillStage())
    run_training(distill_config(tmp_path / "split", **{**mixed, "max_steps": 3}), stage=DistillStage())
    run_training(distill_config(tmp_path / "split", **mixed, resume="latest"), stage=DistillStage())
    assert losses(tmp_path / "split") == losses(tmp_path / "straight")
    shares = [r["on_policy"] for r in rows(tmp_path / "straight") if "loss" in r]
    assert 0.0 in shares and 1.0 in shares


def test_the_logit_cache_round_trips_and_a_second_student_never_loads_the_teacher(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    cache = tmp_path / "cache"
    vocab = MICRO["vocab_size"]
    run_training(distill_config(tmp_path / "writes", logit_cache=str(cache), top_k=vocab), stage=DistillStage())
    info = json.loads((cache / "cache.json").read_text())
    assert info["top_k"] == vocab
    assert info["teacher"] == distill_teacher.fingerprint(list_checkpoints(teacher_run())[-1])
    # exactly the teacher's top-k log-probs on the rows
    stored = load_file(str(cache / "train.safetensors"))
    teacher = load_model(teacher_run())[0]
    stage_rows = distill_setup.text_rows(data_dir(), 16, None, 4, 2)
    with torch.no_grad():
        logits, _ = teacher(stage_rows.train["idx"][:5])
    top = top_k_of(logits, vocab)
    assert torch.equal(stored["ids"][:5].long(), top.ids)
    assert torch.equal(stored["logprobs"][:5], top.logprobs)
    # k = vocabulary: the same run as with the teacher's full logits
    run_training(distill_config(tmp_path / "full", logit_cache=None, top_k=None), stage=DistillStage())
    assert losses(tmp_path / "writes") == pytest.approx(losses(tmp_path / "full"), rel=1e-5)

    def refuse(*_: Any) -> None:
        raise AssertionError("the teacher was loaded")

    monkeypatch.setattr(distill_setup, "load_teacher", refuse)
    run_training(distill_config(tmp_path / "reads", teacher=None, logit_cache=str(cache), top_k=vocab),
                 stage=DistillStage())
    assert losses(tmp_path / "reads") == losses(tmp_path / "writes")
    run_training(distill_config(tmp_path / "top8", teacher=None, logit_cache=str(cache), top_k=8),
                 stage=DistillStage())  # fewer than cached: the first k of the sorted ones
    assert losses(tmp_path / "top8") != losses(tmp_path / "reads")


@functools.lru_cache(maxsize=1)
def other_teacher() -> Path:
    """Same shape and tokenizer as teacher_run, other weights."""
    root = Path(tempfile.mkdtemp(prefix="tinylm-distill-other-"))
    atexit.register(shutil.rmtree, root, ignore_errors=True)
    pretrain(pretrain_config(root / "other", max_steps=2, optimizer="adamw", seq_len_warmup_steps=0))
    return root / "other"


def _other_tokenizer_teacher(tmp_path: Path) -> Path:
    other = train_bpe(["SELECT name FROM users WHERE id = 1;\n", "<p>hello</p>\n"] * 40, vocab_size=MICRO["vocab_size"])
    config = ModelConfig(**{**MICRO, "vocab_size": other.vocab_size})
    path = tmp_path / "foreign"
    save_checkpoint(path, 1, build_model(config), config, tokenizer_file=other.save(tmp_path / "other.json"))
    return path


@pytest.mark.parametrize("case, message", [
    ("other_tokenizer", "split text differently: distillation needs one tokenizer"),
    ("reward_model", "is a reward model"),
    ("too_big", "GiB free"),
    ("missing", "checkpoint not found"),
    ("temperature_zero", "--temperature"),
    ("temperature_negative", "--temperature"),
    ("beta", "--beta"),
    ("lambda", "--on-policy"),
    ("foreign_cache", "was written for another run (another teacher"),
    ("stale_cache", "was written for another run (another train rows"),
    ("not_a_cache", "is not a logit cache"),
    ("no_teacher", "--teacher is required"),
])
def test_bad_input_is_one_line_and_writes_nothing(tmp_path: Path, capsys: pytest.CaptureFixture[str],
                                                  monkeypatch: pytest.MonkeyPatch, case: str, message: str) -> None:
    args = distill_args(tmp_path / "out")
    at = args.index("--teacher") + 1
    if case in ("foreign_cache", "stale_cache"):
        cache = tmp_path / "cache"
        assert main([*distill_args(tmp_path / "first"), "--logit-cache", str(cache)]) == 0
        capsys.readouterr()
        args += ["--logit-cache", str(cache)]
        if case == "foreign_cache":
            args[at] = str(other_teacher())
        else:
            args += ["--train-rows", "100"]
    edits = {
        "other_tokenizer": lambda: (args.__setitem__(at, str(_other_tokenizer_teacher(tmp_path))),
                                    args.extend(["--data", str(data_dir())])),
        "reward_model": lambda: args.__setitem__(at, str(reward_run())),
        "too_big": lambda: monkeypatch.setattr(distill_teacher, "available_memory", lambda: 1000),
        "missing": lambda: args.__setitem__(at, str(tmp_path / "nope")),
        "temperature_zero": lambda: args.extend(["--temperature", "0"]),
        "temperature_negative": lambda: args.extend(["--temperature", "-1"]),
        "beta": lambda: args.extend(["--beta", "1.5"]),
        "lambda": lambda: args.extend(["--on-policy", "2"]),
        "not_a_cache": lambda: (tmp_path.joinpath("full").mkdir(), tmp_path.joinpath("full", "x").write_text("x"),
                                args.extend(["--logit-cache", str(tmp_path / "full")])),
        "no_teacher": lambda: (args.pop(at), args.pop(at - 1)),
    }
    if case in edits:
        edits[case]()
    capsys.readouterr()
    code = main(args)
    err = capsys.readouterr().err.strip().splitlines()
    assert code in (1, 2) and len(err) == 1 and err[0].startswith("tinylm: error:") and message in err[0], err
    assert not list_checkpoints(tmp_path / "out")


def test_on_policy_samples_are_scored_exactly() -> None:
    """The sampled tokens' student log-probs equal a recompute (as RL's do); the teacher's log-probs at the
    sampled positions, through the stage's masked forward, equal the teacher's own full forward."""
    student = build_model(ModelConfig(**{**MICRO, **STUDENT, "vocab_size": MICRO["vocab_size"]})).eval()
    teacher = load_model(teacher_run())[0]
    prompts = [[5, 6, 7, 8], [9, 10, 11, 12, 13, 14], [20, 21]]
    batch = sample_batch(student, prompts, seeds=[1, 2, 3], max_new_tokens=6, stop_ids=[0], pad_id=0)
    mask = batch["targets"] != IGNORE
    assert int(mask.sum()) > 0 and not bool(mask[:, :1].any())  # the prompt is never a target
    ids = torch.cat([batch["idx"], batch["targets"][:, -1:].clamp(min=0)], dim=1)
    with torch.no_grad():
        recomputed, _ = policy_logprobs(student, ids, temperature=1.0)
        masked, _ = teacher(batch["idx"], logits_at=mask)
        full, _ = teacher(batch["idx"])
    torch.testing.assert_close(recomputed[mask], batch["sample_logprobs"][mask], atol=1e-5, rtol=1e-5)
    torch.testing.assert_close(masked, full[mask], atol=1e-5, rtol=1e-5)


def test_sequence_level_answers_become_sft_data(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    args = ["distill", "--teacher", str(chat_teacher()), "--base", str(base_run()), "--data", TASK,
            "--sequence-level", "--ce-weight", "1", "--out", str(tmp_path / "seq"), "--batch-size", "4",
            "--seq-len", "32", "--max-steps", "2", "--eval-every", "0", "--train-examples", "24",
            "--eval-examples", "4", "--max-new-tokens", "4", "--no-progress", "--threads", "1", "--dtype", "fp32",
            "--compile", "off", "--attention", "sdpa", "--optimizer", "adamw", "--lr", "0.001"]
    assert main(args) == 0
    out = capsys.readouterr().err
    assert "sequence-level: the teacher answered 24 training prompts" in out
    answers = [json.loads(line) for line in (tmp_path / "seq" / "teacher_answers.jsonl").read_text().splitlines()]
    assert len(answers) == 24
    assert all([m["role"] for m in a["messages"]] == ["user", "assistant"] for a in answers)
    # the file is SFT data as it is
    sft = sft_config(tmp_path / "sft", data=str(tmp_path / "seq" / "teacher_answers.jsonl"), max_steps=1,
                     eval_every=0)
    assert run_training(sft, stage=SFTStage()).checkpoint is not None
    # --keep-correct keeps exactly the verified ones
    verified = int(out.split("training prompts, ")[1].split(" ")[0])
    code = main([*args[:-0 or None], "--keep-correct", "--out", str(tmp_path / "kept")])
    if verified == 0:
        assert code == 1
    else:
        kept = (tmp_path / "kept" / "teacher_answers.jsonl").read_text().splitlines()
        assert code == 0 and len(kept) == verified


def test_conversations_are_distilled_on_the_assistants_tokens_with_exact_match(tmp_path: Path) -> None:
    config = distill_config(tmp_path / "chat", teacher=str(chat_teacher()), base=str(base_run()), overrides={},
                            data=TASK, seq_len=32, train_examples=64, eval_examples=8, max_new_tokens=4,
                            on_policy=0.5)
    run_training(config, stage=DistillStage())
    evals = [r for r in rows(tmp_path / "chat") if "dev_divergence" in r]
    assert evals and all(0.0 <= r["exact_match"] <= 1.0 and "dev_bpb" not in r for r in evals)
    meta = json.loads((list_checkpoints(tmp_path / "chat")[-1] / "config.json").read_text())
    assert "{%- generation -%}" in meta["chat_template"]
    assert [link["stage"] for link in meta["lineage"]] == ["pretrain", "distill"]


def _rl_args(out: Path, teacher: Path, *extra: str) -> list[str]:
    return ["rl", "--base", str(base_run()), "--task", TASK, "--out", str(out), "--batch-size", "2", "--group-size",
            "3", "--max-new-tokens", "5", "--max-steps", "2", "--eval-every", "0", "--eval-examples", "3",
            "--train-examples", "40", "--no-progress", "--threads", "1", "--seed", "5", "--lr", "0.003",
            "--teacher", str(teacher), *extra]


@pytest.mark.parametrize("algo", ["grpo", "rloo"])
def test_the_rl_form_scores_each_rollout_by_its_reverse_kl_to_the_teacher(tmp_path: Path, algo: str) -> None:
    """With the policy itself as the teacher the sampled reverse KL is 0 at the first step (the sampler's log-probs
    and the teacher's forward agree); with another teacher it is positive, and with --reward none the score is
    the KL's alone."""
    assert main(_rl_args(tmp_path / "self", base_run(), "--algo", algo, "--reward", "none", "--dtype", "fp32")) == 0
    first = next(r for r in rows(tmp_path / "self") if "teacher_kl" in r)
    assert abs(first["teacher_kl"]) < 1e-5 and first["reward"] == 0.0
    assert main(_rl_args(tmp_path / "other", chat_teacher(), "--algo", algo, "--reward", "none")) == 0
    logged = [r for r in rows(tmp_path / "other") if "teacher_kl" in r]
    assert len(logged) == 2 and all(r["teacher_kl"] > 0.01 and r["reward"] == 0.0 for r in logged)


def test_the_rl_form_refuses_a_teacher_with_another_tokenizer(tmp_path: Path,
                                                             capsys: pytest.CaptureFixture[str]) -> None:
    assert main(_rl_args(tmp_path / "rl", _other_tokenizer_teacher(tmp_path))) == 1
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "splits text differently" in err[0]


DISTILL_TABLE = """
[distill]
batch_size = 2
seq_len = 32
max_steps = 2
eval_every = 0
train_examples = 16
eval_examples = 4
max_new_tokens = 4
"""


def test_the_pipeline_distils_its_sft_model_from_its_grpo_model_when_asked(tmp_path: Path) -> None:
    from test_pipeline import _pipeline, _road

    file = _road(tmp_path)
    text = 'stages = ["pretrain", "sft", "dpo", "grpo", "distill"]\n' + file.read_text() + DISTILL_TABLE
    file.write_text(text, encoding="utf-8")
    out = tmp_path / "road"
    result = _pipeline(file, out, "--dtype", "fp32")
    assert [r["stage"] for r in result["rows"]] == ["pretrain", "sft", "dpo", "grpo", "distill"]
    assert result["rows"][-1]["gain"]["paired"]  # against the GRPO teacher's exact-match
    meta = json.loads((list_checkpoints(out / "distill")[-1] / "config.json").read_text())
    assert [link["stage"] for link in meta["lineage"]] == ["pretrain", "sft", "distill"]
    assert meta["teacher"].startswith(str(out / "grpo")) and meta["distill"]["on_policy"] == 1.0
    file.write_text(text + 'teacher = "elsewhere"\n', encoding="utf-8")
    assert main(["pipeline", str(file), "--out", str(tmp_path / "bad"), "--no-progress"]) == 1


def test_the_draft_benchmark_decodes_as_generate_does_and_prints_one_json(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]) -> None:
    """benchmarks/draft_speed.py on micro models: the target itself as a draft accepts every token; another model
    accepts fewer; greedy output identical either way (speculative decoding never changes it)."""
    sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "benchmarks"))
    import draft_speed

    draft = tmp_path / "draft"
    run_training(distill_config(draft, max_steps=2, eval_every=0), stage=DistillStage())
    monkeypatch.setattr(sys, "argv", ["draft_speed.py", "--target", str(teacher_run()), "--draft",
                                      f"itself={teacher_run()}", "--draft", f"student={draft}", "--prompts", "2",
                                      "--prompt-tokens", "8", "--new-tokens", "12", "--repeats", "1",
                                      "--unpacked-verifier"])
    draft_speed.main()
    report = json.loads(capsys.readouterr().out)
    itself, student = report["drafts"]["itself"], report["drafts"]["student"]
    assert itself["acceptance_rate"] == 1.0 and itself["identical_greedy_output"]
    assert student["identical_greedy_output"] and student["acceptance_rate"] < 1.0
    assert report["target_tokens_per_s"] > 0 and student["speedup"] > 0
    unpacked = report["drafts"]["student, unpacked verifier"]  # the same rounds, the target laid out for one row
    assert unpacked["acceptance_rate"] == student["acceptance_rate"] and unpacked["identical_greedy_output"]


@pytest.mark.slow  # four processes, each measuring nothing but still importing torch: about 15 s
def test_the_pretraining_race_trains_both_students_and_prints_one_json(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]) -> None:
    """benchmarks/distill_pretrain.py on micro models: both runs of a seed, the distilled one with its own options,
    one JSON object."""
    sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "benchmarks"))
    import distill_pretrain

    shape = [a for name, value in STUDENT.items() for a in ("--set", f"{name}={value}")]
    monkeypatch.setattr(sys, "argv", ["distill_pretrain.py", "--teacher", str(teacher_run()), *shape, "--budget",
                                      "0.5", "--seeds", "1", "--eval-batches", "2", "--out", str(tmp_path),
                                      "--distill-args", "--ce-weight 0.2", "--", "--threads", "1", "--dtype", "fp32",
                                      "--compile", "off", "--attention", "sdpa", "--batch-size", "4", "--seq-len",
                                      "16"])
    distill_pretrain.main()
    report = json.loads(capsys.readouterr().out)
    assert set(report["runs"]["plain"]) == set(report["runs"]["distilled"]) == {"1"}
    assert report["distill_options"] == ["--ce-weight", "0.2"] and len(report["distilled_minus_plain"]) == 1
    distilled = json.loads((list_checkpoints(tmp_path / "distilled-1")[-1] / "config.json").read_text())
    assert distilled["distill"]["ce_weight"] == 0.2
    plain, kd = (rows(tmp_path / f"{name}-1") for name in ("plain", "distilled"))
    assert any("dev_bpb" in r for r in plain) and any("dev_bpb" in r for r in kd)


def test_torchrun_two_processes_equal_one_on_policy_batches_included(tmp_path: Path) -> None:
    """Two processes with half the batch each: the same rows, the same on-policy prompts and seeds, the same run."""
    from test_ddp import torchrun

    mixed = ("--on-policy", "0.5", "--max-new-tokens", "4", "--max-steps", "4", "--eval-every", "2",
             "--optimizer", "adamw", "--lr", "0.003")
    assert main(distill_args(tmp_path / "single", *mixed)) == 0
    args = distill_args(tmp_path / "ddp", *mixed)
    args[args.index("--batch-size") + 1] = "2"
    result = torchrun(*args)
    assert result.returncode == 0, result.stderr[-3000:]
    assert losses(tmp_path / "ddp") == pytest.approx(losses(tmp_path / "single"), abs=1e-5)
    shares = [r["on_policy"] for r in rows(tmp_path / "ddp") if "loss" in r]
    assert 0.0 in shares and 1.0 in shares
    dev = [[r["dev_divergence"] for r in rows(tmp_path / run) if "dev_divergence" in r] for run in ("single", "ddp")]
    assert dev[0] == pytest.approx(dev[1], abs=1e-5)
