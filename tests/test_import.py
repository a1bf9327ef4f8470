"""`tinylm import`: a `transformers` checkpoint on disk becomes a tinylm checkpoint computing the same logits."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import torch

from test_export import CONFIGS, EOT, VARIED_TEXT, encode, make_checkpoint, train_tokenizer
from tinylm.checkpoint import TRAIN_STATE, checkpoint_model_config, load_weights, read_weights, resolve_checkpoint
from tinylm.cli.main import main
from tinylm.models.factory import build_model

transformers = pytest.importorskip("transformers")


def load_ours(run_dir: Path) -> torch.nn.Module:
    """What `tinylm generate` does with a checkpoint: config.json -> model -> weights (strict)."""
    ckpt = resolve_checkpoint(run_dir)
    model = build_model(checkpoint_model_config(ckpt))
    load_weights(model, ckpt)
    return model.eval()


def save_hf_model(folder: Path, architecture: str, seed: int = 0, **fields) -> torch.nn.Module:
    """A random `transformers` model (norm weights too) saved with save_pretrained, plus a tokenizer."""
    config_class = {"LlamaForCausalLM": transformers.LlamaConfig, "Qwen3ForCausalLM": transformers.Qwen3Config}
    base = dict(vocab_size=300, hidden_size=32, intermediate_size=48, num_hidden_layers=2, num_attention_heads=4,
                num_key_value_heads=2, head_dim=8, max_position_embeddings=32, rms_norm_eps=1e-6,
                tie_word_embeddings=False, rope_parameters={"rope_type": "default", "rope_theta": 25000.0})
    torch.manual_seed(seed)
    model = getattr(transformers, architecture)(config_class[architecture](**{**base, **fields})).eval()
    with torch.no_grad():
        for p in model.parameters():
            p.add_(torch.randn_like(p) * 0.1)
    folder.mkdir(parents=True, exist_ok=True)
    train_tokenizer(folder / "tokenizer.json")
    model.config.eos_token_id = model.config.bos_token_id = 0  # EOT is the tokenizer's first token
    model.save_pretrained(folder)
    return model


def test_a_gpt2_with_its_own_gelu_imports_as_the_classic_model(tmp_path: Path) -> None:
    """GPT2Config's defaults (gelu_new, biases everywhere but the head): the classic model with mlp_activation=gelu."""
    config = transformers.GPT2Config(vocab_size=300, n_positions=32, n_embd=32, n_layer=2, n_head=4,
                                     bos_token_id=0, eos_token_id=0)
    torch.manual_seed(0)
    hf_model = transformers.GPT2LMHeadModel(config).eval()
    with torch.no_grad():
        for p in hf_model.parameters():
            p.add_(torch.randn_like(p) * 0.1)
    (tmp_path / "hf").mkdir()
    train_tokenizer(tmp_path / "hf" / "tokenizer.json")
    hf_model.save_pretrained(tmp_path / "hf")
    assert main(["import", str(tmp_path / "hf"), "--out", str(tmp_path / "run")]) == 0
    ours = load_ours(tmp_path / "run")
    assert (ours.config.arch, ours.config.mlp_activation) == ("classic", "gelu")
    idx = torch.randint(0, 300, (2, 32), generator=torch.Generator().manual_seed(1))
    with torch.no_grad():
        assert (ours(idx)[0] - hf_model(idx).logits).abs().max().item() <= 1e-5


@pytest.mark.parametrize("architecture, fields", [
    ("LlamaForCausalLM", {}),
    ("LlamaForCausalLM", {"tie_word_embeddings": True, "num_key_value_heads": 1}),
    ("Qwen3ForCausalLM", {"num_key_value_heads": 4}),
])
def test_import_gives_identical_logits(tmp_path: Path, architecture: str, fields: dict) -> None:
    hf_model = save_hf_model(tmp_path / "hf", architecture, **fields)
    out = tmp_path / "run"
    assert main(["import", str(tmp_path / "hf"), "--out", str(out)]) == 0
    ours = load_ours(out)
    assert ours.config.qk_norm == (architecture == "Qwen3ForCausalLM")
    idx = torch.randint(0, 300, (2, 32), generator=torch.Generator().manual_seed(1))
    with torch.no_grad():
        assert (ours(idx)[0] - hf_model(idx).logits).abs().max().item() <= 1e-5
    ckpt = resolve_checkpoint(out)
    assert (ckpt / "tokenizer.json").read_bytes() == (tmp_path / "hf" / "tokenizer.json").read_bytes()
    info = json.loads((ckpt / "config.json").read_text())
    assert info["step"] == 0 and info["eot_id"] == 0 and info["hf_architecture"] == architecture
    assert not (ckpt / TRAIN_STATE).exists()  # weights only: there is no optimizer state to resume


def test_imported_tokenizer_is_the_same_tokenizer(tmp_path: Path) -> None:
    from tokenizers import Tokenizer

    save_hf_model(tmp_path / "hf", "LlamaForCausalLM")
    assert main(["import", str(tmp_path / "hf"), "--out", str(tmp_path / "run")]) == 0
    ours = Tokenizer.from_file(str(resolve_checkpoint(tmp_path / "run") / "tokenizer.json"))
    theirs = transformers.AutoTokenizer.from_pretrained(tmp_path / "hf")
    for text in VARIED_TEXT:
        assert encode(ours, text) == theirs(text).input_ids
    assert ours.token_to_id(EOT) == 0


@pytest.mark.parametrize("name", CONFIGS)
def test_export_then_import_is_the_identity_on_weights(tmp_path: Path, name: str) -> None:
    ckpt, model = make_checkpoint(tmp_path, CONFIGS[name])
    assert main(["export", "--checkpoint", str(ckpt), "--out", str(tmp_path / "hf")]) == 0
    assert main(["import", str(tmp_path / "hf"), "--out", str(tmp_path / "back")]) == 0
    before = read_weights(ckpt)
    after = read_weights(resolve_checkpoint(tmp_path / "back"))
    if CONFIGS[name].arch == "classic" and not CONFIGS[name].qkv_bias:  # GPT-2 stores a zero qkv bias
        after = {k: v for k, v in after.items() if not k.endswith("attn.qkv.bias")}
        assert checkpoint_model_config(resolve_checkpoint(tmp_path / "back")).qkv_bias
    assert before.keys() == after.keys()
    for key in before:
        assert torch.equal(before[key], after[key]), key


# ---- bad input: one line, non-zero exit, nothing in --out ---------------------------------------
def refused(tmp_path: Path, capsys, hf_dir: Path) -> str:
    out = tmp_path / "run"
    capsys.readouterr()  # drop what building the input printed (transformers' progress bars)
    assert main(["import", str(hf_dir), "--out", str(out)]) == 1
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and err[0].startswith("tinylm: error: "), err
    assert not out.exists() and not list(tmp_path.glob(".tmp-*"))
    return err[0]


def edit_config(folder: Path, **changes) -> None:
    data = json.loads((folder / "config.json").read_text())
    data.update(changes)
    (folder / "config.json").write_text(json.dumps(data))


def test_not_a_checkpoint_folder(tmp_path: Path, capsys) -> None:
    (tmp_path / "nothing").mkdir()
    assert "config.json" in refused(tmp_path, capsys, tmp_path / "nothing")
    assert "config.json" in refused(tmp_path, capsys, tmp_path / "missing")


def test_corrupt_safetensors(tmp_path: Path, capsys) -> None:
    save_hf_model(tmp_path / "hf", "LlamaForCausalLM")
    data = (tmp_path / "hf" / "model.safetensors").read_bytes()
    (tmp_path / "hf" / "model.safetensors").write_bytes(data[: len(data) // 2])
    assert "model.safetensors" in refused(tmp_path, capsys, tmp_path / "hf")


def test_pickled_weights_are_refused(tmp_path: Path, capsys) -> None:
    save_hf_model(tmp_path / "hf", "LlamaForCausalLM")
    (tmp_path / "hf" / "model.safetensors").rename(tmp_path / "hf" / "pytorch_model.bin")
    assert "safetensors" in refused(tmp_path, capsys, tmp_path / "hf")


@pytest.mark.parametrize("changes, words", [
    (dict(rope_parameters={"rope_type": "longrope", "factor": 2.0, "rope_theta": 10000.0}), "longrope"),
    (dict(rope_scaling={"type": "dynamic", "factor": 2.0}), "rope_scaling says 'dynamic', rope_parameters says"),
    (dict(rope_parameters={"rope_type": "yarn", "factor": 2.0, "original_max_position_embeddings": 8,
                           "mscale_all_dim": 1.0}), "unsupported rope parameters mscale_all_dim"),
    (dict(model_type="bert", architectures=["BertForMaskedLM"]), "unsupported architecture"),
    (dict(attention_bias=True), "bias"),
    (dict(hidden_act="gelu"), "hidden_act"),
    (dict(some_new_feature=True), "some_new_feature"),
])
def test_unsupported_configs_are_refused(tmp_path: Path, capsys, changes: dict, words: str) -> None:
    save_hf_model(tmp_path / "hf", "LlamaForCausalLM")
    edit_config(tmp_path / "hf", **changes)
    assert words in refused(tmp_path, capsys, tmp_path / "hf")


def test_partial_sliding_window_is_refused(tmp_path: Path, capsys) -> None:
    save_hf_model(tmp_path / "hf", "Qwen3ForCausalLM")
    edit_config(tmp_path / "hf", use_sliding_window=True, sliding_window=4,
                layer_types=["full_attention", "sliding_attention"])
    assert "some layers" in refused(tmp_path, capsys, tmp_path / "hf")


def test_weights_that_do_not_fit_the_config(tmp_path: Path, capsys) -> None:
    save_hf_model(tmp_path / "hf", "LlamaForCausalLM")
    edit_config(tmp_path / "hf", intermediate_size=64)
    assert "shape" in refused(tmp_path, capsys, tmp_path / "hf")


@pytest.mark.parametrize("lr", [1e-12, 1e-2])
def test_imported_checkpoint_trains_with_resume(tmp_path: Path, lr: float) -> None:
    """`tinylm train --resume IMPORTED` starts from the imported weights, not from a fresh initialization:
    with a vanishing learning rate they come out unchanged (to 1e-9), with a real one they move."""
    from test_train_support import data_dir
    from tinylm.checkpoint import read_weights

    save_hf_model(tmp_path / "hf", "LlamaForCausalLM")
    assert main(["import", str(tmp_path / "hf"), "--out", str(tmp_path / "imported")]) == 0
    imported = resolve_checkpoint(tmp_path / "imported")
    out = tmp_path / "tuned"
    argv = ["train", "--data", str(data_dir()), "--out", str(out), "--resume", str(imported), "--max-steps", "2",
            "--batch-size", "2", "--seq-len", "16", "--optimizer", "adamw", "--lr", str(lr), "--warmup-steps", "0",
            "--eval-every", "0", "--sample-tokens", "0", "--no-progress", "--threads", "1"]
    assert main(argv) == 0
    tuned = resolve_checkpoint(out)
    assert checkpoint_model_config(tuned) == checkpoint_model_config(imported)
    before, after = read_weights(imported), read_weights(tuned)
    largest_change = max((before[name] - after[name]).abs().max().item() for name in before)
    assert (largest_change > 1e-4) if lr > 1e-6 else (largest_change < 1e-9)


def test_a_refused_write_is_one_line_and_leaves_nothing(tmp_path: Path, capsys, monkeypatch) -> None:
    import errno
    import os

    from tinylm.interop import hf_import

    def full_disk(folder, *args, **kwargs):
        (Path(folder) / "model.safetensors").write_bytes(b"half")
        raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC), str(Path(folder) / "model.safetensors"))

    save_hf_model(tmp_path / "hf", "LlamaForCausalLM")
    monkeypatch.setattr(hf_import, "save_checkpoint", full_disk)
    line = refused(tmp_path, capsys, tmp_path / "hf")
    assert f"cannot write {tmp_path / 'run'}: No space left on device" in line
