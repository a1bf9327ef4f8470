"""`tinylm export`: a checkpoint becomes a folder `transformers` loads offline and runs identically."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import torch

from model_variants import BASE, classic_config, modern_config
from tinylm.checkpoint import save_checkpoint
from tinylm.cli.main import main
from tinylm.config import ModelConfig
from tinylm.models.factory import build_model

transformers = pytest.importorskip("transformers")

EOT = "<|endoftext|>"
CORPUS = [
    "def add(a, b):\n    return a + b\n",
    "The quick brown fox jumps over the lazy dog. " * 3,
    "import os\nprint(os.path.join('a', 'b'))\n",
    "Unicode: café, naïve, 東京, emoji 🙂 and tabs\tand  double  spaces.\n",
    "class Point:\n    def __init__(self, x, y):\n        self.x, self.y = x, y\n",
]
VARIED_TEXT = [
    "def add(x, y):\n\treturn x+y  # sum",
    "  leading spaces and trailing   ",
    "café 東京 🙂 mixed scripts ½",
    f"two documents{EOT}joined by the end-of-text token",
    "",
    "1234567890 !@#$%^&*()",
]


def train_tokenizer(path: Path, vocab_size: int = 300) -> Path:
    """A tiny byte-level BPE with EOT as its one special token (the format tinylm's tokenizer writes)."""
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers

    tokenizer = Tokenizer(models.BPE())
    tokenizer.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tokenizer.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(vocab_size=vocab_size, special_tokens=[EOT],
                                  initial_alphabet=pre_tokenizers.ByteLevel.alphabet())
    tokenizer.train_from_iterator(CORPUS * 4, trainer)
    tokenizer.save(str(path))
    return path


def our_tokenizer(path: Path):
    """The project's tokenizer loader once it exists, else the `tokenizers` object it wraps."""
    try:
        from tinylm.tokenizer import load_tokenizer
    except ImportError:
        from tokenizers import Tokenizer

        return Tokenizer.from_file(str(path))
    return load_tokenizer(path)


def encode(tokenizer, text: str) -> list[int]:
    ids = tokenizer.encode(text)
    return list(ids.ids) if hasattr(ids, "ids") else list(ids)


def random_model(config: ModelConfig, seed: int = 0) -> torch.nn.Module:
    torch.manual_seed(seed)
    model = build_model(config).eval()
    with torch.no_grad():
        for name, p in model.named_parameters():
            if name.endswith("lm_head.bias"):
                continue
            p.add_(torch.randn_like(p) * (1.0 if name.endswith("router.weight") else 0.1))
    return model


def make_checkpoint(tmp_path: Path, config: ModelConfig, seed: int = 0) -> tuple[Path, torch.nn.Module]:
    tokenizer = train_tokenizer(tmp_path / "tokenizer.json")
    model = random_model(config, seed)
    ckpt = save_checkpoint(tmp_path / "run", 7, model, config, tokenizer_file=tokenizer)
    return ckpt, model


def greedy(model: torch.nn.Module, prompt: list[int], steps: int, eot_id: int) -> list[int]:
    """Our own greedy loop: full forward each step, argmax of the last position, stop at EOT."""
    tokens = list(prompt)
    with torch.no_grad():
        for _ in range(steps):
            logits = model(torch.tensor([tokens]))[0]
            tokens.append(int(logits[0, -1].argmax()))
            if tokens[-1] == eot_id:
                break
    return tokens


CONFIGS = {
    "llama_gqa": modern_config("gqa", vocab_size=300, tie_embeddings=False, rope_theta=30000.0),
    "llama_mqa_tied": modern_config("mqa", vocab_size=300),
    "qwen3": modern_config("qknorm", vocab_size=300),
    "mistral_window": modern_config("window", vocab_size=300),
    "qwen2_moe": modern_config("moe_shared", vocab_size=300),
    "qwen3_moe": modern_config("moe", vocab_size=300, qk_norm=True),
    "mixtral": modern_config("moe", vocab_size=300),
    "deepseek_mla": modern_config("mla_qlora", vocab_size=300, norm_eps=1e-6),
    "gpt2": classic_config(vocab_size=300),
}


@pytest.mark.parametrize("name", CONFIGS)
def test_export_loads_in_transformers_with_same_logits_and_generations(tmp_path: Path, name: str) -> None:
    config = CONFIGS[name]
    ckpt, model = make_checkpoint(tmp_path, config)
    out = tmp_path / "hf"
    assert main(["export", "--checkpoint", str(tmp_path / "run"), "--out", str(out)]) == 0
    assert sorted(p.name for p in out.iterdir()) == sorted(
        ["config.json", "model.safetensors", "generation_config.json", "tokenizer.json", "tokenizer_config.json"])

    hf_model = transformers.AutoModelForCausalLM.from_pretrained(out).eval()
    idx = torch.randint(0, config.vocab_size, (2, config.context_length), generator=torch.Generator().manual_seed(3))
    with torch.no_grad():
        assert (model(idx)[0] - hf_model(idx).logits).abs().max().item() <= 1e-5

    hf_tokenizer = transformers.AutoTokenizer.from_pretrained(out)
    eot_id = hf_tokenizer.eos_token_id
    prompt = hf_tokenizer("def add(a, b):").input_ids
    steps = config.context_length - len(prompt)
    ours = greedy(model, prompt, steps, eot_id)
    theirs = hf_model.generate(torch.tensor([prompt]), max_new_tokens=steps, do_sample=False,
                               attention_mask=torch.ones(1, len(prompt), dtype=torch.long))[0].tolist()
    assert ours == theirs


def test_exported_files_follow_the_conventions(tmp_path: Path) -> None:
    from safetensors import safe_open

    ckpt, _ = make_checkpoint(tmp_path, modern_config("gqa", vocab_size=300, rope_theta=30000.0))
    out = tmp_path / "hf"
    assert main(["export", "--checkpoint", str(ckpt), "--out", str(out)]) == 0
    config = json.loads((out / "config.json").read_text())
    assert config["architectures"] == ["LlamaForCausalLM"]
    assert config["rope_theta"] == 30000.0 and config["rope_parameters"]["rope_theta"] == 30000.0
    assert config["tie_word_embeddings"] is True
    with safe_open(str(out / "model.safetensors"), "pt") as f:
        keys = set(f.keys())
    assert "model.embed_tokens.weight" in keys and "lm_head.weight" not in keys  # tied: stored once
    tokenizer = our_tokenizer(out / "tokenizer.json")
    eot_id = tokenizer.eot_id if hasattr(tokenizer, "eot_id") else tokenizer.token_to_id(EOT)
    generation = json.loads((out / "generation_config.json").read_text())
    assert generation["eos_token_id"] == generation["bos_token_id"] == generation["pad_token_id"] == eot_id
    assert config["eos_token_id"] == eot_id
    tokenizer_config = json.loads((out / "tokenizer_config.json").read_text())
    assert tokenizer_config["eos_token"] == tokenizer_config["pad_token"] == EOT


def test_autotokenizer_ids_equal_ours(tmp_path: Path) -> None:
    ckpt, _ = make_checkpoint(tmp_path, modern_config("gqa", vocab_size=300))
    out = tmp_path / "hf"
    assert main(["export", "--checkpoint", str(ckpt), "--out", str(out)]) == 0
    ours = our_tokenizer(ckpt / "tokenizer.json")
    theirs = transformers.AutoTokenizer.from_pretrained(out)
    for text in VARIED_TEXT:
        ids = encode(ours, text)
        assert theirs(text).input_ids == ids, text
        assert theirs.decode(ids) == text


def test_bfloat16_export(tmp_path: Path) -> None:
    ckpt, model = make_checkpoint(tmp_path, modern_config("gqa", vocab_size=300))
    out = tmp_path / "hf"
    assert main(["export", "--checkpoint", str(ckpt), "--out", str(out), "--dtype", "bf16"]) == 0
    hf_model = transformers.AutoModelForCausalLM.from_pretrained(out)
    assert hf_model.dtype == torch.bfloat16
    assert torch.equal(hf_model.model.embed_tokens.weight, model.token_embed.weight.to(torch.bfloat16))


def one_error_line(capsys) -> str:
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and err[0].startswith("tinylm: error: "), err
    return err[0]


def test_gated_model_is_refused_naming_the_feature(tmp_path: Path, capsys) -> None:
    make_checkpoint(tmp_path, modern_config("gated", vocab_size=300))
    out = tmp_path / "hf"
    assert main(["export", "--checkpoint", str(tmp_path / "run"), "--out", str(out)]) == 1
    assert "attn_output_gate" in one_error_line(capsys)
    assert not out.exists()


def test_classic_with_head_bias_is_refused(tmp_path: Path, capsys) -> None:
    config = ModelConfig(arch="classic", head_bias=True, **{**BASE, "vocab_size": 300})
    model = random_model(config)
    with torch.no_grad():
        model.lm_head.bias.fill_(0.1)
    save_checkpoint(tmp_path / "run", 1, model, config, tokenizer_file=train_tokenizer(tmp_path / "tok.json"))
    out = tmp_path / "hf"
    assert main(["export", "--checkpoint", str(tmp_path / "run"), "--out", str(out)]) == 1
    assert "lm_head bias" in one_error_line(capsys)
    assert not out.exists() and not list(tmp_path.glob(".tmp-*"))


def test_folder_that_is_not_a_checkpoint(tmp_path: Path, capsys) -> None:
    (tmp_path / "empty").mkdir()
    out = tmp_path / "hf"
    assert main(["export", "--checkpoint", str(tmp_path / "empty"), "--out", str(out)]) == 1
    one_error_line(capsys)
    assert not out.exists()


def test_corrupt_safetensors_writes_nothing(tmp_path: Path, capsys) -> None:
    ckpt, _ = make_checkpoint(tmp_path, modern_config("gqa", vocab_size=300))
    (ckpt / "model.safetensors").write_bytes(b"\x10\x00\x00\x00\x00\x00\x00\x00{not json")
    out = tmp_path / "hf"
    assert main(["export", "--checkpoint", str(ckpt), "--out", str(out)]) == 1
    assert "model.safetensors" in one_error_line(capsys)
    assert not out.exists() and not list(tmp_path.glob(".tmp-*"))


def test_existing_output_is_never_overwritten(tmp_path: Path, capsys) -> None:
    ckpt, _ = make_checkpoint(tmp_path, modern_config("gqa", vocab_size=300))
    out = tmp_path / "hf"
    out.mkdir()
    (out / "keep.txt").write_text("mine")
    assert main(["export", "--checkpoint", str(ckpt), "--out", str(out)]) == 1
    one_error_line(capsys)
    assert [p.name for p in out.iterdir()] == ["keep.txt"]


def refuse_writes(monkeypatch: pytest.MonkeyPatch, where: str, out: Path) -> None:
    """The disk refuses a write at one point of the export, as a read-only or full location would."""
    import errno
    import os

    import safetensors.torch
    from safetensors import SafetensorError

    import tinylm.interop.hf_export as hf_export

    if where == "weights":  # what safetensors really raises on a read-only disk
        def save_file(tensors, filename, metadata=None) -> None:
            Path(filename).write_bytes(b"half")
            raise SafetensorError(f'Error while serializing: I/O error: Read-only file system (os error 30) at path '
                                  f'"{filename}"')

        monkeypatch.setattr(safetensors.torch, "save_file", save_file)
    elif where == "tokenizer":
        def write_hf_tokenizer(source, folder, context_length, chat_template=None) -> int:
            (Path(folder) / "tokenizer.json").write_text("{half")
            raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC), str(Path(folder) / "tokenizer.json"))

        monkeypatch.setattr(hf_export, "write_hf_tokenizer", write_hf_tokenizer)
    else:  # the folder itself cannot be made
        real_mkdir = Path.mkdir

        def mkdir(self, *args, **kwargs) -> None:
            if self == out.parent or out.parent in self.parents:
                raise PermissionError(errno.EACCES, os.strerror(errno.EACCES), str(self))
            real_mkdir(self, *args, **kwargs)

        monkeypatch.setattr(Path, "mkdir", mkdir)


@pytest.mark.parametrize("where, reason", [("weights", "Read-only file system"),
                                           ("tokenizer", "No space left on device"),
                                           ("folder", "Permission denied")])
def test_a_refused_write_is_one_line_and_leaves_nothing(tmp_path: Path, capsys, monkeypatch, where: str,
                                                        reason: str) -> None:
    ckpt, _ = make_checkpoint(tmp_path, modern_config("gqa", vocab_size=300))
    out = tmp_path / "exports" / "hf"
    refuse_writes(monkeypatch, where, out)
    assert main(["export", "--checkpoint", str(ckpt), "--out", str(out)]) == 1
    line = one_error_line(capsys)
    assert f"cannot write {out}: {reason}" in line
    assert not out.exists() and not list(tmp_path.rglob(".tmp-*"))
