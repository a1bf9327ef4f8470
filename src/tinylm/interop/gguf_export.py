"""Export a tinylm checkpoint as one GGUF file for llama.cpp, with an Ollama Modelfile beside it.

    OUT/model.gguf    the architecture's hyper-parameters, the tokenizer, the chat template, the weights
    OUT/Modelfile     `ollama create NAME -f OUT/Modelfile`

The file is written by the `gguf` package (llama.cpp's own Python writer and quantizers) from what
tinylm knows exactly: its config, its weights and its tokenizer, so no converter has to guess
(gguf_layout.py says which architectures, gguf_tensors.py how the weights are laid out,
gguf_vocab.py how the tokenizer is written). A LoRA run is written with its adapters merged; a
reward model is refused (llama.cpp runs language models, and a score head is not one). The folder
appears only once complete.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

from tinylm.checkpoint.layout import TOKENIZER
from tinylm.checkpoint.load import adapter_parts
from tinylm.checkpoint.read import checkpoint_model_config, read_checkpoint_config, read_weights, resolve_checkpoint
from tinylm.errors import TinyLMError
from tinylm.interop.gguf_layout import gguf_architecture, hyperparameters
from tinylm.interop.gguf_tensors import QUANTS, encode_tensor, gguf_tensors
from tinylm.interop.gguf_vocab import GGUFVocab, gguf_vocab
from tinylm.interop.hf_export import canonical_weights
from tinylm.interop.ollama_modelfile import modelfile, ollama_note
from tinylm.interop.output_folder import output_folder
from tinylm.models.lora import merged_weights
from tinylm.tokenizer.chat_tokens import CALL

GGUF_NAME = "model.gguf"
FILE_TYPES = {"f32": 0, "f16": 1, "q4_0": 2, "q8_0": 7, "bf16": 32}  # llama.cpp's LlamaFileType


@dataclass
class GGUFExport:
    folder: Path
    architecture: str
    quant: str
    bytes: int
    fallbacks: list[str] = field(default_factory=list)  # matrices written f16: rows not whole blocks
    note: str | None = None  # what Ollama will do differently with this file

    @property
    def file(self) -> Path:
        return self.folder / GGUF_NAME


def export_gguf(checkpoint: str | Path, out: str | Path, quant: str = "f32") -> GGUFExport:
    """Write `out/model.gguf` and `out/Modelfile` from a checkpoint (or the newest of a run folder)."""
    if quant not in QUANTS:
        raise TinyLMError(f"unknown GGUF type {quant!r} (expected one of {', '.join(QUANTS)})")
    ckpt = resolve_checkpoint(checkpoint)
    info = read_checkpoint_config(ckpt)
    if info.get("reward_head") == "score":
        raise TinyLMError("cannot export to GGUF: a reward model scores text and llama.cpp runs language models "
                          "(export it with --format hf, as *ForSequenceClassification)")
    config = checkpoint_model_config(ckpt)
    architecture = gguf_architecture(config)  # refuses before anything is read or written
    tokenizer_file = ckpt / TOKENIZER
    if not tokenizer_file.is_file():
        raise TinyLMError(f"checkpoint {ckpt} has no {TOKENIZER}: a GGUF file carries its tokenizer")
    vocab = gguf_vocab(tokenizer_file, config.vocab_size, info.get("chat_template"))
    adapter = info.get("adapter")
    if adapter is None:
        stored = read_weights(ckpt)
    else:
        base, lora, scale = adapter_parts(ckpt, adapter)
        stored = merged_weights(base, lora, scale)
    tensors = gguf_tensors(canonical_weights(config, stored, ckpt, None), config, architecture)

    with output_folder(out) as folder:
        run_name = ckpt.parent.parent.name if ckpt.parent.name == "checkpoints" else ckpt.name
        fallbacks = _write_gguf(folder / GGUF_NAME, architecture, config, vocab, tensors, quant, name=run_name)
        stops = [vocab.tokens[i] for i in dict.fromkeys((vocab.eot_id, vocab.end_id))]
        (folder / "Modelfile").write_text(
            modelfile(GGUF_NAME, config.context_length, stops, vocab.tokens[vocab.eot_id],
                      chat=vocab.chat_template is not None, note=ollama_note(architecture),
                      tools=CALL in (vocab.chat_template or "")), encoding="utf-8")
        size = (folder / GGUF_NAME).stat().st_size
    return GGUFExport(Path(out), architecture, quant, size, fallbacks, ollama_note(architecture))


def _write_gguf(path: Path, architecture: str, config, vocab: GGUFVocab, tensors: dict, quant: str,
                name: str) -> list[str]:
    import gguf

    writer = gguf.GGUFWriter(str(path), architecture)
    writer.add_name(name)
    writer.add_file_type(FILE_TYPES[quant])
    if quant in ("q8_0", "q4_0"):
        writer.add_quantization_version(gguf.GGML_QUANT_VERSION)
    for key, value in hyperparameters(config, architecture).items():
        add = {float: writer.add_float32, str: writer.add_string}.get(type(value), writer.add_uint32)
        add(f"{architecture}.{key}", value)

    writer.add_tokenizer_model("gpt2")
    writer.add_tokenizer_pre(vocab.pre)
    writer.add_token_list(vocab.tokens)
    writer.add_token_types(vocab.token_types)
    writer.add_token_merges(vocab.merges)
    writer.add_bos_token_id(vocab.eot_id)
    writer.add_eos_token_id(vocab.end_id)
    writer.add_pad_token_id(vocab.eot_id)
    writer.add_add_bos_token(False)
    writer.add_add_eos_token(False)
    if vocab.chat_template is not None:
        writer.add_chat_template(vocab.chat_template)
        writer.add_eot_token_id(vocab.end_id)

    fallbacks = []
    for tensor_name, tensor in tensors.items():
        data, qtype, fell_back = encode_tensor(tensor, quant)
        writer.add_tensor(tensor_name, data, raw_dtype=qtype)
        if fell_back:
            fallbacks.append(tensor_name)
    writer.write_header_to_file()
    writer.write_kv_data_to_file()
    writer.write_tensors_to_file()
    writer.close()
    return fallbacks
