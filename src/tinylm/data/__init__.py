"""Corpora -> token shards -> batches.

`prepare.prepare_dataset` reads a corpus (`sources.open_corpus`: the embedded stdlib, local files, Hugging
Face datasets), cuts long documents at line breaks (`chunks`) and over-long runs without whitespace
(`long_runs`), splits it by document hash (`split`, or a tail of the tokens for tiny corpora:
`tail_split`), tokenizes it into flat uint16/uint32 shards with JSON sidecars (`encode`, `staging`,
`shards`) in a per-user folder (`tinylm.paths`), reporting what it met in the input (`corpus_report`) and
its progress (`progress`); `loader` serves training and evaluation batches from those shards with zero
copies, and `row_loader` and `packing` serve fixed rows (packed conversations, preference pairs).

Data knows tokens, not models: it imports tokenizer, paths and errors; never models, train,
stages or cli.
"""
