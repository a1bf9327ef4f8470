"""Supervised fine-tuning as a stage: learn the assistant's side of conversations (`tinylm sft`).

`config.py` holds `SFTConfig` (what `tinylm sft` can be told beyond the shared post-training
options), `data.py` reads conversations from a file (JSONL, JSON array, CSV), `builtin:TASK` or `hf:NAME`, and
`stage.py` is the `Stage` the one engine runs: chat-format rows with a loss mask, packed, and the
masked cross-entropy.

A stage plugs into the engine: it imports train.stage, the shared stages modules (from_base,
post_config, ...), tasks, data, runtime, options and evaluate.exact_match; never cli or pipeline,
nor another stage.
"""
