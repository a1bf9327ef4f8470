"""Corpora -> token shards -> batches.

`prepare.prepare_dataset` reads a corpus (`sources.open_corpus`: the embedded stdlib, local files, Hugging
Face datasets), cuts long documents at line breaks (`chunks`) and over-long runs without whitespace
(`long_runs`), splits it by document hash (`split`, or a tail of the tokens for tiny corpora:
`tail_split`), tokenizes it into flat uint16/uint32 shards with JSON sidecars (`encode`, `staging`,
`shards`) in a per-user folder (`folders`), reporting what it met in the input (`corpus_report`) and
its progress (`progress`); `loader` serves training and evaluation batches from those shards with zero
copies, and `row_loader` and `packing` serve fixed rows (packed conversations, preference pairs).

`rows/` is the one reader of user rows (JSONL, JSON arrays, CSV, `hf:NAME[:CONFIG][:SPLIT]`, with
FILE:LINE errors, U+FFFD notes and the stop/skip rule) that SFT, preference pairs, RL prompt files,
tasks, evaluation and the studio's preview all read through; its `hf:` grammar is the corpus's too.

Data knows tokens, not models: it imports tokenizer, paths and errors; never models, train,
stages or cli.
"""
