"""GGUF export proved by readers tinylm did not write: transformers (`gguf_file=`) and the `gguf` package's reader.

transformers rebuilds the model and the tokenizer from the file alone, so equal logits (1e-5 at f32)
and equal ids mean the file says what tinylm computes. Two hyper-parameters transformers 5.24 does
not take from a GGUF file are passed from the file's own keys: qwen3's head size (its loader keeps
Qwen3Config's default of 128) and gpt2's position count (it reads the context length into n_ctx only).
llama.cpp itself reads both (tests/test_gguf_llama_cpp.py runs it).
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import torch

from gguf_support import R50K_PROBES, VOCAB, bpe_tokenizer, fake_r50k, random_checkpoint
from model_variants import classic_config, modern_config
from test_sft_export import sft_run
from tinylm.checkpoint.load import load_model
from tinylm.cli.main import main
from tinylm.errors import TinyLMError
from tinylm.interop.gguf_export import GGUF_NAME, export_gguf
from tinylm.interop.gguf_vocab import portable_chat_template
from tinylm.tokenizer.chat_format import ChatFormat
from tinylm.tokenizer.load import load_tokenizer
from tinylm.tokenizer.tiktoken_bridge import PROBE_TEXT

transformers = pytest.importorskip("transformers")
gguf = pytest.importorskip("gguf")
pytestmark = pytest.mark.usefixtures("one_thread")

TOLERANCE = 1e-5
ACCEPTED = {
    "llama_gqa_tied": modern_config("gqa", vocab_size=VOCAB),
    "llama_mqa_untied": modern_config("mqa", vocab_size=VOCAB, tie_embeddings=False, rope_theta=50000.0),
    "llama_mha_wide_heads": modern_config("wide_heads", vocab_size=VOCAB, n_kv_head=4, head_dim=24),
    "qwen3": modern_config("qknorm", vocab_size=VOCAB, rope_theta=1e6, norm_eps=1e-6),
    "qwen3_wide_heads_untied": modern_config("qknorm", vocab_size=VOCAB, head_dim=16, tie_embeddings=False),
    "gpt2_gelu": classic_config(vocab_size=VOCAB, mlp_activation="gelu"),
    "gpt2_gelu_tied_qkv_bias": classic_config(vocab_size=VOCAB, mlp_activation="gelu", qkv_bias=True,
                                              layer_norm_eps=1e-6).replace(tie_embeddings=True),
}
EXPECTED_ARCH = {"llama": "llama", "qwen3": "qwen3", "gpt2": "gpt2"}


@pytest.fixture(scope="module")
def tokenizer_file(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return bpe_tokenizer(tmp_path_factory.mktemp("gguf-tokenizer"))


def read_keys(file: Path) -> dict[str, object]:
    """Every metadata key of a GGUF file with its value (arrays as lists), by the `gguf` package's reader."""
    reader = gguf.GGUFReader(str(file))
    return {name: field.contents() for name, field in reader.fields.items()}


def hf_from_gguf(folder: Path) -> torch.nn.Module:
    """transformers' model from the file, with the two keys its GGUF loader leaves at defaults taken from the file."""
    keys = read_keys(folder / GGUF_NAME)
    arch = keys["general.architecture"]
    extra = {"qwen3": {"head_dim": keys.get("qwen3.attention.key_length")},
             "gpt2": {"n_positions": keys.get("gpt2.context_length")}}.get(arch, {})
    return transformers.AutoModelForCausalLM.from_pretrained(folder, gguf_file=GGUF_NAME, dtype=torch.float32,
                                                             **extra).eval()


def max_logit_error(ours: torch.nn.Module, theirs: torch.nn.Module, vocab: int, length: int) -> float:
    idx = torch.randint(0, vocab, (2, length), generator=torch.Generator().manual_seed(1))
    with torch.no_grad():
        return (ours(idx)[0] - theirs(idx).logits).abs().max().item()


@pytest.mark.parametrize("name", list(ACCEPTED))
def test_transformers_loads_the_file_with_tinylm_logits(name: str, tokenizer_file: Path, tmp_path: Path) -> None:
    config = ACCEPTED[name]
    checkpoint = random_checkpoint(tmp_path, "run", config, tokenizer_file)
    done = export_gguf(checkpoint, tmp_path / "gguf")
    assert done.architecture == EXPECTED_ARCH[name.split("_")[0]]
    ours = load_model(checkpoint)[0].eval()
    assert max_logit_error(ours, hf_from_gguf(done.folder), config.vocab_size, config.context_length) <= TOLERANCE


def test_the_permutation_is_what_makes_llama_agree(tokenizer_file: Path, tmp_path: Path, monkeypatch) -> None:
    """Without the q/k row permutation llama's interleaved RoPE computes other scores: the check can fail."""
    import tinylm.interop.gguf_tensors as tensors

    config = ACCEPTED["llama_gqa_tied"]
    checkpoint = random_checkpoint(tmp_path, "run", config, tokenizer_file)
    monkeypatch.setattr(tensors, "interleave_rope_rows", lambda weight, n_heads: weight)
    done = export_gguf(checkpoint, tmp_path / "gguf")
    ours = load_model(checkpoint)[0].eval()
    assert max_logit_error(ours, hf_from_gguf(done.folder), config.vocab_size, config.context_length) > 1e-2


PROBES = [
    PROBE_TEXT,
    "plain ASCII text, with punctuation; and 'quotes'.",
    "digits 1234567890 12 3.14159 0xFF 2026-12-02",
    "contractions: I'm we'll they've she'd it's don't",
    "CJK 東京タワー 北京 한국어",
    "emoji 🙂👍🏽🚀 and e\u0301",
    "<|user|>hi<|end|><|assistant|>hello<|end|><|endoftext|><|system|>",
]


def test_the_tokenizer_rebuilt_from_the_file_gives_tinylm_ids(tokenizer_file: Path, tmp_path: Path) -> None:
    checkpoint = random_checkpoint(tmp_path, "run", ACCEPTED["llama_gqa_tied"], tokenizer_file)
    folder = export_gguf(checkpoint, tmp_path / "gguf").folder
    theirs = transformers.AutoTokenizer.from_pretrained(folder, gguf_file=GGUF_NAME)
    ours = load_tokenizer(tokenizer_file)
    for text in PROBES:
        assert theirs(text, add_special_tokens=False)["input_ids"] == ours.encode(text), text
    role_ids = [ours.special_tokens[t] for t in ("<|user|>", "<|end|>", "<|assistant|>", "<|endoftext|>")]
    assert all(theirs.convert_ids_to_tokens(i) in ("<|user|>", "<|end|>", "<|assistant|>", "<|endoftext|>")
               for i in role_ids)  # each role token one id, kept whole


def test_reader_round_trip_every_key_and_tensor(tokenizer_file: Path, tmp_path: Path) -> None:
    """Exactly the expected metadata keys and tensors: nothing missing that llama.cpp needs, nothing stray."""
    config = ACCEPTED["llama_mqa_untied"]
    checkpoint = random_checkpoint(tmp_path, "run", config, tokenizer_file)
    file = export_gguf(checkpoint, tmp_path / "gguf").file
    keys = read_keys(file)
    hyper = {f"llama.{k}" for k in ("context_length", "embedding_length", "block_count", "feed_forward_length",
                                     "attention.head_count", "attention.head_count_kv", "vocab_size",
                                     "attention.layer_norm_rms_epsilon", "attention.key_length",
                                     "attention.value_length", "rope.dimension_count", "rope.freq_base")}
    tokenizer_keys = {f"tokenizer.ggml.{k}" for k in ("model", "pre", "tokens", "token_type", "merges", "bos_token_id",
                                                      "eos_token_id", "padding_token_id", "add_bos_token",
                                                      "add_eos_token")}
    header = {"GGUF.version", "GGUF.tensor_count", "GGUF.kv_count", "general.architecture", "general.name",
              "general.file_type"}
    assert set(keys) == header | hyper | tokenizer_keys  # a base model: no chat template, no end-of-turn
    assert keys["general.name"] == "run"  # the run folder, not "step_00000001"
    assert keys["llama.attention.head_count_kv"] == 1 and keys["llama.rope.freq_base"] == 50000.0
    assert keys["llama.rope.dimension_count"] == config.dim_per_head
    assert keys["tokenizer.ggml.pre"] == "gpt-2" and keys["tokenizer.ggml.model"] == "gpt2"
    tokens, types = keys["tokenizer.ggml.tokens"], keys["tokenizer.ggml.token_type"]
    assert len(tokens) == len(types) == config.vocab_size
    ours = load_tokenizer(tokenizer_file)
    assert {tokens[i] for i, t in enumerate(types) if t == 3} == set(ours.special_tokens)  # control = specials
    assert keys["tokenizer.ggml.eos_token_id"] == keys["tokenizer.ggml.bos_token_id"] == ours.eot_id
    assert keys["tokenizer.ggml.add_bos_token"] is False

    reader = gguf.GGUFReader(str(file))
    shapes = {t.name: tuple(int(d) for d in t.shape) for t in reader.tensors}  # innermost dimension first
    C, F, D = config.n_embed, config.mlp_width, config.dim_per_head
    expected = {"token_embd.weight": (C, config.vocab_size), "output.weight": (C, config.vocab_size),
                "output_norm.weight": (C,)}
    for i in range(config.n_blocks):
        expected.update({f"blk.{i}.attn_norm.weight": (C,), f"blk.{i}.ffn_norm.weight": (C,),
                         f"blk.{i}.attn_q.weight": (C, config.n_head * D), f"blk.{i}.attn_k.weight": (C, D),
                         f"blk.{i}.attn_v.weight": (C, D), f"blk.{i}.attn_output.weight": (config.n_head * D, C),
                         f"blk.{i}.ffn_gate.weight": (C, F), f"blk.{i}.ffn_up.weight": (C, F),
                         f"blk.{i}.ffn_down.weight": (F, C)})
    assert shapes == expected
    assert {t.tensor_type.name for t in reader.tensors} == {"F32"}


def test_reader_round_trip_gpt2_tensors_with_biases(tokenizer_file: Path, tmp_path: Path) -> None:
    """gpt2: learned positions, LayerNorm and every linear with a bias (the qkv bias tinylm lacks, as zeros)."""
    config = ACCEPTED["gpt2_gelu"]
    file = export_gguf(random_checkpoint(tmp_path, "run", config, tokenizer_file), tmp_path / "gguf").file
    keys = read_keys(file)
    assert {k for k in keys if k.startswith("gpt2.")} == {
        f"gpt2.{k}" for k in ("context_length", "embedding_length", "block_count", "feed_forward_length",
                              "attention.head_count", "attention.head_count_kv", "attention.layer_norm_epsilon",
                              "vocab_size")}
    reader = gguf.GGUFReader(str(file))
    shapes = {t.name: tuple(int(d) for d in t.shape) for t in reader.tensors}
    C = config.n_embed
    expected = {"token_embd.weight": (C, VOCAB), "position_embd.weight": (C, config.context_length),
                "output_norm.weight": (C,), "output_norm.bias": (C,), "output.weight": (C, VOCAB)}
    for i in range(config.n_blocks):
        for name, weight, bias in (("attn_norm", None, C), ("ffn_norm", None, C), ("attn_qkv", (C, 3 * C), 3 * C),
                                   ("attn_output", (C, C), C), ("ffn_up", (C, 4 * C), 4 * C),
                                   ("ffn_down", (4 * C, C), C)):
            expected[f"blk.{i}.{name}.weight"] = weight or (C,)
            expected[f"blk.{i}.{name}.bias"] = (bias,)
    assert shapes == expected
    qkv_bias = next(t for t in reader.tensors if t.name == "blk.0.attn_qkv.bias")
    assert not qkv_bias.data.any()  # tinylm's default classic model has no qkv bias: zeros, not garbage


def test_a_chat_model_carries_its_template_and_ends_its_turn_with_end(tmp_path: Path) -> None:
    done = export_gguf(sft_run(0), tmp_path / "gguf")
    keys = read_keys(done.file)
    assert {"tokenizer.chat_template", "tokenizer.ggml.eot_token_id"} <= set(keys)
    assert not {k for k in keys if "tokenizer" not in k and not k.startswith(("GGUF.", "general.", "llama."))}
    tokenizer = load_model(sft_run(0))[1]
    end = tokenizer.special_tokens["<|end|>"]
    assert keys["tokenizer.ggml.eos_token_id"] == keys["tokenizer.ggml.eot_token_id"] == end
    assert keys["tokenizer.ggml.bos_token_id"] == keys["tokenizer.ggml.padding_token_id"] == tokenizer.eot_id
    template = keys["tokenizer.chat_template"]
    # transformers' own tag, which llama.cpp's and Ollama's template engines lack
    assert "{%- generation" not in template and "endgeneration" not in template
    assert template == portable_chat_template(ChatFormat.from_tokenizer(tokenizer).jinja_template())
    hf = transformers.AutoTokenizer.from_pretrained(done.folder, gguf_file=GGUF_NAME)
    messages = [{"role": "system", "content": "be brief"}, {"role": "user", "content": "What is 2 + 3?"}]
    rendered = hf.apply_chat_template(messages, chat_template=template, add_generation_prompt=True, tokenize=False)
    assert hf(rendered, add_special_tokens=False)["input_ids"] == ChatFormat.from_tokenizer(tokenizer).prompt_ids(
        messages)


def test_a_lora_run_is_written_merged(tmp_path: Path) -> None:
    done = export_gguf(sft_run(4), tmp_path / "gguf")
    ours = load_model(sft_run(4))[0].eval()  # the base with its adapters
    assert max_logit_error(ours, hf_from_gguf(done.folder), ours.config.vocab_size, 20) <= TOLERANCE


@pytest.mark.parametrize("quant, types, bound", [("f16", {"F16", "F32"}, 0.01), ("bf16", {"BF16", "F32"}, 0.05),
                                                 ("q8_0", {"Q8_0", "F32"}, 0.2), ("q4_0", {"Q4_0", "F32"}, 3.0)])
def test_quantized_files_store_matrices_in_the_type_and_norms_in_f32(quant: str, types: set[str], bound: float,
                                                                     tokenizer_file: Path, tmp_path: Path) -> None:
    """Dequantized by transformers, each type's logits are near tinylm's: measured 0.0024 (f16), 0.017 (bf16),
    0.061 (q8_0) and 1.04 (q4_0) on this random model, whose logits span about +-10; the bounds are ~3x those."""
    config = modern_config("gqa", vocab_size=VOCAB)  # n_embed 32: every matrix row is whole 32-blocks
    checkpoint = random_checkpoint(tmp_path, "run", config, tokenizer_file)
    full = export_gguf(checkpoint, tmp_path / "f32")
    done = export_gguf(checkpoint, tmp_path / quant, quant)
    reader = gguf.GGUFReader(str(done.file))
    assert {t.tensor_type.name for t in reader.tensors} == types and not done.fallbacks
    assert all(t.tensor_type.name == "F32" for t in reader.tensors if len(t.shape) == 1)
    assert done.bytes < full.bytes
    error = max_logit_error(load_model(checkpoint)[0].eval(), hf_from_gguf(done.folder), VOCAB, 32)
    assert TOLERANCE < error < bound  # rounded weights: close, not equal


def test_rows_that_are_not_whole_blocks_fall_back_to_f16(tokenizer_file: Path, tmp_path: Path) -> None:
    config = modern_config("gqa", vocab_size=VOCAB, n_embed=64, mlp_hidden=72)  # ffn_down rows: 72 numbers
    done = export_gguf(random_checkpoint(tmp_path, "run", config, tokenizer_file), tmp_path / "q8", "q8_0")
    assert done.fallbacks == [f"blk.{i}.ffn_down.weight" for i in range(config.n_blocks)]
    kinds = {t.name: t.tensor_type.name for t in gguf.GGUFReader(str(done.file)).tensors}
    assert kinds["blk.0.ffn_down.weight"] == "F16" and kinds["blk.0.ffn_up.weight"] == "Q8_0"


REFUSED = {
    "classic relu": (classic_config(vocab_size=VOCAB), "mlp_activation='relu'"),
    "mla": (modern_config("mla", vocab_size=VOCAB), "attention='mla'"),
    "gate": (modern_config("gated", vocab_size=VOCAB), "attn_output_gate"),
    "window": (modern_config("window", vocab_size=VOCAB), "sliding_window=5"),
    "moe": (modern_config("moe", vocab_size=VOCAB), "n_experts=4"),
    "head bias": (classic_config(vocab_size=VOCAB, mlp_activation="gelu", head_bias=True), "lm_head bias"),
}


@pytest.mark.parametrize("name", list(REFUSED))
def test_variants_llama_cpp_would_misread_are_refused_naming_the_field(name: str, tokenizer_file: Path,
                                                                         tmp_path: Path, capsys) -> None:
    config, field = REFUSED[name]
    checkpoint = random_checkpoint(tmp_path, "run", config, tokenizer_file, head_bias=True)
    with pytest.raises(TinyLMError, match=f"cannot export to GGUF: {field}".replace("(", r"\(")):
        export_gguf(checkpoint, tmp_path / "gguf")
    assert not (tmp_path / "gguf").exists()
    assert main(["export", "--checkpoint", str(checkpoint), "--out", str(tmp_path / "cli"), "--format", "gguf"]) == 1
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and field.split("=")[0] in err[0]


def test_a_reward_model_is_refused_with_the_reason(tokenizer_file: Path, tmp_path: Path) -> None:
    checkpoint = random_checkpoint(tmp_path, "rm", ACCEPTED["llama_gqa_tied"], tokenizer_file,
                                   meta={"reward_head": "score"})  # how a reward run's checkpoint says what it is
    with pytest.raises(TinyLMError, match="reward model scores text"):
        export_gguf(checkpoint, tmp_path / "gguf")
    assert not (tmp_path / "gguf").exists()


def test_a_tokenizer_that_is_not_gpt2_byte_level_is_refused(tokenizer_file: Path, tmp_path: Path) -> None:
    spec = json.loads(tokenizer_file.read_text())
    spec["pre_tokenizer"] = {"type": "Whitespace"}
    other = tmp_path / "tokenizer.json"
    other.write_text(json.dumps(spec))
    checkpoint = random_checkpoint(tmp_path, "run", ACCEPTED["llama_gqa_tied"], other)
    with pytest.raises(TinyLMError, match="not a GPT-2-style byte-level BPE"):
        export_gguf(checkpoint, tmp_path / "gguf")


def test_cli_writes_the_file_and_the_modelfile(tokenizer_file: Path, tmp_path: Path, capsys) -> None:
    checkpoint = random_checkpoint(tmp_path, "run", ACCEPTED["qwen3"], tokenizer_file)
    out = tmp_path / "gguf"
    assert main(["export", "--checkpoint", str(checkpoint), "--out", str(out), "--format", "gguf",
                 "--quant", "q8_0"]) == 0
    captured = capsys.readouterr()
    assert captured.out.strip() == str(out / GGUF_NAME)
    assert "GGUF (qwen3, q8_0" in captured.err
    assert "note: Ollama runs qwen3 files in its own engine" in captured.err  # a QK-norm model: Ollama's split
    modelfile = (out / "Modelfile").read_text()
    assert modelfile.startswith("# Ollama runs qwen3") and f"\nFROM ./{GGUF_NAME}\n" in modelfile
    assert 'PARAMETER stop "<|endoftext|>"' in modelfile and f"PARAMETER num_ctx {ACCEPTED['qwen3'].context_length}" \
        in modelfile
    assert main(["export", "--checkpoint", str(checkpoint), "--out", str(tmp_path / "hf"), "--quant", "q4_0"]) == 1
    assert "--quant applies to --format gguf" in capsys.readouterr().err


def test_gpt2s_own_r50k_vocabulary_is_written_with_merges_from_its_ranks(tmp_path: Path, monkeypatch) -> None:
    """A tiktoken rank table (r50k's format) becomes tokens + merges that transformers' BPE splits identically.

    The real r50k_base file is never downloaded, so a small rank table in its format stands in for it.
    """
    import tinylm.interop.gguf_vocab as vocab_module
    from tinylm.checkpoint import load_weights
    from tinylm.models.factory import build_model

    tokenizer, ranks = fake_r50k(tmp_path)
    assert vocab_module.merges_from_ranks(ranks)[:4] == [(b"h", b"e"), (b"l", b"l"), (b"he", b"ll"), (b"hell", b"o")]
    monkeypatch.setattr(vocab_module, "load_tokenizer", lambda path: tokenizer)  # the checkpoint names r50k
    config = modern_config("gqa", vocab_size=tokenizer.vocab_size)
    checkpoint = random_checkpoint(tmp_path, "run", config, tokenizer.save(tmp_path / "tokenizer.json"))
    folder = export_gguf(checkpoint, tmp_path / "gguf").folder
    theirs = transformers.AutoTokenizer.from_pretrained(folder, gguf_file=GGUF_NAME)
    for text in R50K_PROBES:
        assert theirs(text, add_special_tokens=False)["input_ids"] == tokenizer.encode(text), text
    ours = build_model(config)
    load_weights(ours, checkpoint)  # not load_model: that would look for the real r50k file
    assert max_logit_error(ours.eval(), hf_from_gguf(folder), config.vocab_size, config.context_length) <= TOLERANCE
