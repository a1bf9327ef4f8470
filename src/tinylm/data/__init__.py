"""Corpora -> token shards -> batches.

`prepare.prepare_dataset` reads a corpus (`corpus.open_corpus`: the embedded stdlib, local files, Hugging
Face datasets), splits it by document hash (`split`), tokenizes it into flat uint16/uint32 shards with JSON
sidecars (`encode`, `staging`, `shards`) in a per-user folder (`paths`); `loader` serves training and
evaluation batches from those shards with zero copies.
"""
