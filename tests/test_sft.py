"""`tinylm sft` end to end on a micro base model: it learns, resumes bit-exactly, equals itself under
torchrun, grows a vocabulary that lacks the chat tokens, trains LoRA adapters only, and turns bad input
into one line."""

from __future__ import annotations

import functools
import json
import shutil
import tempfile
from pathlib import Path
from typing import Any

import pytest
import torch

from test_ddp import torchrun
from test_train_support import config as pretrain_config
from test_train_support import losses, rows
from tinylm.checkpoint import list_checkpoints, load_model, load_train_state, read_weights
from tinylm.cli.main import main
from tinylm.metrics import read_samples
from tinylm.stages.pretrain import pretrain
from tinylm.stages.sft.config import SFTConfig
from tinylm.stages.sft.stage import SFTStage
from tinylm.tokenizer.chat_tokens import CHAT_TOKENS
from tinylm.train.loop import run_training

pytestmark = pytest.mark.usefixtures("one_thread")

# problems a micro model can hold: 2-digit sums of ~12 tokens, a 32-token window
TASK = "builtin:arith?digits=1&ops=+"


@functools.lru_cache(maxsize=1)
def base_run() -> Path:
    """A micro model pretrained for a few steps on the test corpus (its BPE reserves the chat tokens).

    By AdamW, as before pretraining's default became Muon: the post-training tests' tolerances (float rounding
    through Adam's division, a fixed batch learned in a few steps) were set on this base. A Muon-pretrained base
    is post-trained end to end by the pipeline's tests."""
    root = Path(tempfile.mkdtemp(prefix="tinylm-sft-base-"))
    pretrain(pretrain_config(root / "base", max_steps=4, optimizer="adamw", seq_len_warmup_steps=0))
    return root / "base"


def sft_config(out: Path, **changes: Any) -> SFTConfig:
    base: dict[str, Any] = dict(base=str(base_run()), data=TASK, out=str(out), batch_size=4, seq_len=32,
                                max_steps=6, warmup_steps=2, log_every=1, eval_every=3, train_examples=64,
                                eval_examples=8, max_new_tokens=4, progress=False, seed=3, threads=1, lr=3e-3,
                                dtype="fp32", compile="off", attention="sdpa")
    base.update(changes)
    return SFTConfig(**base)


def sft_args(out: Path, *extra: str) -> list[str]:
    return ["sft", "--base", str(base_run()), "--data", TASK, "--out", str(out), "--batch-size", "4",
            "--seq-len", "32", "--warmup-steps", "2", "--log-every", "1", "--eval-every", "3",
            "--train-examples", "64", "--eval-examples", "8", "--max-new-tokens", "4", "--no-progress",
            "--seed", "3", "--threads", "1", "--lr", "0.003", "--dtype", "fp32", "--compile", "off",
            "--attention", "sdpa", *extra]


def test_sft_trains_evaluates_and_records_its_lineage(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(sft_args(tmp_path / "sft", "--max-steps", "6")) == 0
    out = capsys.readouterr().out
    assert "dev loss (assistant tokens)" in out and "held-out exact-match" in out and "->" in out
    logged = rows(tmp_path / "sft")
    evals = [r for r in logged if "dev_loss" in r]
    assert [r["step"] for r in evals] == [0, 3, 6]  # before the first step, then every --eval-every
    assert all(0.0 <= r["exact_match"] <= 1.0 for r in evals)
    assert evals[-1]["dev_loss"] < evals[0]["dev_loss"]  # it learned the assistant's side
    meta = json.loads((list_checkpoints(tmp_path / "sft")[-1] / "config.json").read_text())
    assert meta["stage"] == "sft" and "{%- generation -%}" in meta["chat_template"]
    assert [link["stage"] for link in meta["lineage"]] == ["pretrain", "sft"]
    assert meta["lineage"][1]["from"] == meta["base"] and meta["lineage"][1]["data"] == TASK
    samples = read_samples(tmp_path / "sft")  # the replies behind each exact-match, for the studio's run page
    assert sorted({s["step"] for s in samples}) == [0, 3, 6]
    assert all(s["prompt"].startswith("What is") and isinstance(s["verified"], bool) for s in samples)


def test_sft_resume_is_bit_exact(tmp_path: Path) -> None:
    run_training(sft_config(tmp_path / "straight", schedule_steps=6), stage=SFTStage())
    run_training(sft_config(tmp_path / "split", max_steps=3, schedule_steps=6), stage=SFTStage())
    run_training(sft_config(tmp_path / "split", max_steps=6, schedule_steps=6, resume="latest"), stage=SFTStage())
    assert losses(tmp_path / "split") == losses(tmp_path / "straight")
    assert load_train_state(list_checkpoints(tmp_path / "split")[-1])["step"] == 6
    assert read_samples(tmp_path / "split") == read_samples(tmp_path / "straight")  # none twice, none lost


def test_packing_changes_speed_not_the_objective(tmp_path: Path) -> None:
    """Same conversations, one per row or packed: the first step (same weights) sees the same token mean
    only when each micro-batch holds the same conversations, so compare the dev loss at step 0 instead."""
    run_training(sft_config(tmp_path / "packed", max_steps=1), stage=SFTStage())
    run_training(sft_config(tmp_path / "padded", max_steps=1, packing=False), stage=SFTStage())
    first = [next(r for r in rows(tmp_path / run) if r["step"] == 0) for run in ("packed", "padded")]
    assert first[0]["dev_loss"] == pytest.approx(first[1]["dev_loss"], abs=1e-5)


@pytest.mark.parametrize("nodes", [1, pytest.param(2, marks=pytest.mark.slow)])  # 2: two torchrun nodes
def test_torchrun_two_processes_equal_one(tmp_path: Path, nodes: int) -> None:
    run_training(sft_config(tmp_path / "single", batch_size=4, max_steps=4), stage=SFTStage())
    result = torchrun(*sft_args(tmp_path / "ddp", "--batch-size", "2", "--max-steps", "4"), nodes=nodes)
    assert result.returncode == 0, result.stderr[-3000:]
    assert losses(tmp_path / "ddp") == pytest.approx(losses(tmp_path / "single"), abs=1e-5)
    dev = [[r["dev_loss"] for r in rows(tmp_path / run) if "dev_loss" in r] for run in ("single", "ddp")]
    assert dev[0] == pytest.approx(dev[1], abs=1e-5)


def test_lora_trains_only_adapters_and_saves_them_alone(tmp_path: Path) -> None:
    summary = run_training(sft_config(tmp_path / "lora", lora_rank=4, lr=1e-2), stage=SFTStage())
    ckpt = Path(summary.checkpoint)
    stored = read_weights(ckpt)
    assert stored and all("lora_" in name for name in stored)  # adapters only: the base is named instead
    meta = json.loads((ckpt / "config.json").read_text())
    assert meta["adapter"]["base"] == str(list_checkpoints(base_run())[-1])
    assert meta["adapter"]["lora"]["rank"] == 4
    base_bytes = (list_checkpoints(base_run())[-1] / "model.safetensors").stat().st_size
    assert (ckpt / "model.safetensors").stat().st_size < base_bytes / 2
    assert any(torch.count_nonzero(t) for name, t in stored.items() if "lora_B" in name)  # B moved from 0
    (merged,) = list_checkpoints(tmp_path / "lora" / "merged")  # and a self-contained merged copy
    assert "adapter" not in json.loads((merged / "config.json").read_text())
    x = torch.randint(0, 300, (1, 12), generator=torch.Generator().manual_seed(1))
    with torch.no_grad():
        assert torch.allclose(load_model(merged)[0](x)[0], load_model(ckpt)[0](x)[0], atol=1e-6)


def test_lora_resume_is_bit_exact(tmp_path: Path) -> None:
    lora = dict(lora_rank=4, lora_dropout=0.1, schedule_steps=6)
    run_training(sft_config(tmp_path / "straight", **lora), stage=SFTStage())
    run_training(sft_config(tmp_path / "split", max_steps=3, **lora), stage=SFTStage())
    run_training(sft_config(tmp_path / "split", resume="latest", **lora), stage=SFTStage())
    assert losses(tmp_path / "split") == losses(tmp_path / "straight")


def _base_without_chat_tokens(tmp_path: Path) -> Path:
    """A copy of the base whose tokenizer is an older BPE with <|endoftext|> only (and a model sized to it)."""
    from tokenizers import Tokenizer as HFTokenizer
    from tokenizers import decoders, models, pre_tokenizers, trainers

    from tinylm.checkpoint import save_checkpoint
    from tinylm.models.factory import build_model
    from tinylm.tokenizer import load_tokenizer

    hf = HFTokenizer(models.BPE())
    hf.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=True)
    hf.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(vocab_size=300, min_frequency=2, special_tokens=["<|endoftext|>"],
                                  initial_alphabet=pre_tokenizers.ByteLevel.alphabet(), show_progress=False)
    hf.train_from_iterator([f"What is {a} + {b}? {a + b}\n" for a in range(10) for b in range(10)] * 3, trainer)
    (tmp_path / "old.json").write_text(hf.to_str(), encoding="utf-8")
    tokenizer = load_tokenizer(tmp_path / "old.json")
    assert "<|user|>" not in tokenizer.special_tokens
    model_config = load_model(base_run())[0].config.replace(vocab_size=tokenizer.n_vocab)
    torch.manual_seed(0)
    return save_checkpoint(tmp_path / "old-base", 1, build_model(model_config), model_config,
                           tokenizer_file=tmp_path / "old.json")


def test_sft_adds_missing_chat_tokens_and_grows_the_embedding(tmp_path: Path,
                                                               capsys: pytest.CaptureFixture[str]) -> None:
    base = _base_without_chat_tokens(tmp_path)
    old_vocab = load_model(base)[0].config.vocab_size
    summary = run_training(sft_config(tmp_path / "sft", base=str(base), max_steps=2), stage=SFTStage())
    assert f"added the chat token(s) {', '.join(CHAT_TOKENS)}" in capsys.readouterr().err
    model, tokenizer, _ = load_model(summary.checkpoint)
    assert model.config.vocab_size == old_vocab + len(CHAT_TOKENS) == tokenizer.n_vocab
    assert tokenizer.token_to_id("<|end|>") == old_vocab + 3


def _write(path: Path, lines: list[Any]) -> Path:
    path.write_text("".join((x if isinstance(x, str) else json.dumps(x)) + "\n" for x in lines), encoding="utf-8")
    return path


CHAT = {"messages": [{"role": "user", "content": "2+2?"}, {"role": "assistant", "content": "4"}]}


def test_jsonl_in_three_layouts_trains(tmp_path: Path) -> None:
    rows_ = [CHAT, {"instruction": "Add", "input": "1 and 2", "output": "3"},
             {"conversations": [{"from": "human", "value": "hi"}, {"from": "gpt", "value": "hello"}]}] * 20
    data = _write(tmp_path / "mixed.jsonl", rows_)
    assert main(sft_args(tmp_path / "sft", "--max-steps", "2")[:4] + [str(data)] +
                sft_args(tmp_path / "sft", "--max-steps", "2")[5:]) == 0


@pytest.mark.parametrize(("case", "message"), [
    ("unknown_role", "bad.jsonl:2: "),
    ("malformed", "bad.jsonl:3: "),
    ("empty", "no conversations"),
    ("missing_base", "checkpoint not found"),
    ("corrupt_base", "corrupt checkpoint"),
    ("lora_target", "LoRA target"),
    ("lora_rank", "--lora-rank"),
    ("nothing_to_learn", "no conversation has assistant content"),
    ("not_utf8", "bad.jsonl:2: mostly not UTF-8"),
])
def test_bad_input_is_one_line_and_writes_nothing(tmp_path: Path, capsys: pytest.CaptureFixture[str], case: str,
                                                  message: str) -> None:
    bad = tmp_path / "bad.jsonl"
    args = sft_args(tmp_path / "out", "--max-steps", "1")
    data_at = args.index("--data") + 1
    if case == "unknown_role":
        _write(bad, [CHAT, {"messages": [{"role": "bot", "content": "x"}]}])
        args[data_at] = str(bad)
    elif case == "malformed":
        _write(bad, [CHAT, CHAT, '{"messages": [', CHAT])
        args[data_at] = str(bad)
    elif case == "empty":
        _write(bad, [])
        args[data_at] = str(bad)
    elif case == "missing_base":
        args[args.index("--base") + 1] = str(tmp_path / "nope")
    elif case == "corrupt_base":
        broken = tmp_path / "broken"
        shutil.copytree(list_checkpoints(base_run())[-1], broken)
        (broken / "model.safetensors").write_bytes(b"not safetensors")
        args[args.index("--base") + 1] = str(broken)
    elif case == "lora_target":
        args += ["--lora-rank", "2", "--lora-targets", "q,wrong"]
    elif case == "lora_rank":
        args += ["--lora-rank", "-1"]
    elif case == "nothing_to_learn":
        empty_answer = [{"role": "user", "content": "a question"}, {"role": "assistant", "content": ""}]
        _write(bad, [{"messages": empty_answer}] * 3)
        args[data_at] = str(bad)
    elif case == "not_utf8":
        latin1 = {"messages": [{"role": "user", "content": "\xe9" * 100}, {"role": "assistant", "content": "x"}]}
        bad.write_bytes((json.dumps(CHAT) + "\n" + json.dumps(latin1, ensure_ascii=False) + "\n").encode("latin-1"))
        args[data_at] = str(bad)
    assert main(args) == 1
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and err[0].startswith("tinylm: error:") and message in err[0], err
    assert not list_checkpoints(tmp_path / "out")


def test_malformed_rows_can_be_skipped_and_are_counted(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    data = _write(tmp_path / "some-bad.jsonl", [CHAT] * 30 + ['{"oops'] + [CHAT] * 30)
    args = sft_args(tmp_path / "out", "--max-steps", "1", "--on-error", "skip")
    args[args.index("--data") + 1] = str(data)
    assert main(args) == 0
    assert "skipped 1 malformed row(s)" in capsys.readouterr().err


def test_lora_with_added_chat_tokens_trains_and_saves_the_embedding(tmp_path: Path) -> None:
    """LoRA leaves the embedding frozen, but rows added for the chat tokens must learn: that matrix trains
    whole and is stored beside the adapters; resuming such a run is still exact."""
    base = _base_without_chat_tokens(tmp_path)
    lora = dict(base=str(base), lora_rank=2, schedule_steps=4)
    run_training(sft_config(tmp_path / "straight", max_steps=4, **lora), stage=SFTStage())
    run_training(sft_config(tmp_path / "split", max_steps=2, **lora), stage=SFTStage())
    run_training(sft_config(tmp_path / "split", max_steps=4, resume="latest", **lora), stage=SFTStage())
    assert losses(tmp_path / "split") == losses(tmp_path / "straight")
    ckpt = list_checkpoints(tmp_path / "straight")[-1]
    stored = read_weights(ckpt)
    assert "token_embed.weight" in stored and any("lora_A" in k for k in stored)
    assert json.loads((ckpt / "config.json").read_text())["adapter"]["trained_whole"] == ["token_embed.weight"]
    end = stored["token_embed.weight"][-1]  # <|end|>, appended last
    rows_before = load_model(base)[0].token_embed.weight.detach()
    assert not torch.allclose(end, rows_before.mean(0))  # it moved from its mean start


def test_an_adapter_checkpoint_loads_as_its_base_plus_the_merged_adapters(tmp_path: Path,
                                                                           capsys: pytest.CaptureFixture[str]) -> None:
    from tinylm.models.lora import apply_lora, load_lora_state_dict

    summary = run_training(sft_config(tmp_path / "lora", lora_rank=4, lr=1e-2, max_steps=3), stage=SFTStage())
    loaded, _, meta = load_model(summary.checkpoint)  # what generate, chat and export see
    reference, _, _ = load_model(meta["adapter"]["base"])
    apply_lora(reference, sft_config(tmp_path / "x", lora_rank=4).lora_config())
    load_lora_state_dict(reference, read_weights(Path(summary.checkpoint)))
    x = torch.randint(0, loaded.config.vocab_size, (2, 16), generator=torch.Generator().manual_seed(0))
    with torch.no_grad():
        assert torch.allclose(loaded(x)[0], reference.eval()(x)[0], atol=1e-5)
        assert not torch.allclose(loaded(x)[0], load_model(meta["adapter"]["base"])[0](x)[0], atol=1e-3)
    capsys.readouterr()
    assert main(["generate", "--checkpoint", str(tmp_path / "lora"), "--prompt", "What", "--max-new-tokens", "3",
                 "--temperature", "0"]) == 0
    assert capsys.readouterr().out.startswith("What")


def test_long_conversations_are_split_at_turn_boundaries_and_every_answer_trains(tmp_path: Path) -> None:
    exchanges = [[{"role": "user", "content": f"What is {a} + {b}?"}, {"role": "assistant", "content": str(a + b)}]
                 for a in range(3) for b in range(3)]
    conversation = [{"role": "system", "content": "Add."}] + [m for pair in exchanges for m in pair]
    data = _write(tmp_path / "long.jsonl", [{"messages": conversation}] * 4)
    stage = SFTStage()
    run_training(sft_config(tmp_path / "sft", data=str(data), eval_data=str(data), max_steps=1), stage=stage)
    rendered = stage.chat.render(conversation)
    assert len(rendered.ids) > 2 * 33  # far longer than a 32-token row
    for rows_ in (stage.train_rows, stage.dev_rows):
        assert int((rows_["targets"] != -100).sum()) == 4 * sum(rendered.mask)  # each answer once
    assert any("4 longer than a row split at turn boundaries into" in line for line in stage.report)


def test_bytes_that_are_not_utf8_are_said_with_file_and_line(tmp_path: Path,
                                                             capsys: pytest.CaptureFixture[str]) -> None:
    latin1 = {"messages": [{"role": "user", "content": "caf\xe9?"}, {"role": "assistant", "content": "oui"}]}
    data = tmp_path / "latin1.jsonl"
    data.write_bytes(("".join(json.dumps(CHAT) + "\n" for _ in range(30)) + json.dumps(latin1, ensure_ascii=False)
                      + "\n").encode("latin-1"))
    args = sft_args(tmp_path / "out", "--max-steps", "1")
    args[args.index("--data") + 1] = str(data)
    assert main(args) == 0
    assert f"{data}:31: 1 character on 1 line is not UTF-8 and became U+FFFD" in capsys.readouterr().err
