"""Hugging Face interop: tinylm checkpoints as `transformers` and PEFT folders, and `transformers` models back.

Only exact correspondences: an exported model computes our logits (1e-5 in float32), and anything
without a counterpart is refused naming the feature. `hf.py` picks the architecture and maps configs
and weights (names through the one table in `names.py`), `hf_config_reader.py` reads a `transformers`
config back; `hf_export.py`, `hf_reward_export.py` and `peft_export.py` write export folders,
`hf_import.py` writes a run folder, `hf_tokenizer.py` the tokenizer files, and every output folder
appears whole or not at all (`output_folder.py`, `atomic_dir.py`).

It reads and writes checkpoints and imports models, tokenizer, config and errors; never
inference, train, stages or cli. `transformers` itself is imported only where a live model is built.
"""
