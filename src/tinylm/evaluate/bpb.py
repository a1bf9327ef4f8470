"""Bits per byte of a checkpoint on a prepared corpus's dev split, as the training log computes it.

The score is `evaluate/dev_loss.py`'s: the mean loss over the dev shard's first windows, read in order,
times the shard's tokens per byte over ln 2. With no folder named, the corpus is the one the model was
pretrained on, found in the checkpoint's lineage, so the base, SFT, DPO and RL models of one pipeline
are measured on the same text and their numbers compare.

The dev ids were written by the data folder's tokenizer: the checkpoint's must give every one of those
ids the same bytes (a post-trained tokenizer may only have added tokens after them), or the loss would
be measured on text the model never reads that way.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import torch
from torch import nn

from tinylm.checkpoint import TOKENIZER
from tinylm.data.loader import iter_sequential
from tinylm.data.shards import read_sidecar
from tinylm.errors import TinyLMError
from tinylm.evaluate.dev_loss import bits_per_byte, evaluate
from tinylm.tokenizer import load_tokenizer
from tinylm.tokenizer.tokenizer import Tokenizer


def pretraining_data(meta: dict[str, Any]) -> Path:
    """The data folder of the pretraining at the root of a checkpoint's lineage: the first link that learned from
    a prepared data folder (one with a dev split), else the first that started a fresh model (`from` none)."""
    lineage = meta.get("lineage") if isinstance(meta.get("lineage"), list) else []
    links = [link for link in [*lineage, meta] if isinstance(link, dict) and link.get("data")]
    for link in links:
        if (Path(str(link["data"])) / "dev.bin").is_file():
            return Path(str(link["data"]))
    for link in links:
        if "from" in link and link["from"] is None:
            return Path(str(link["data"]))
    raise TinyLMError(f"checkpoint {meta.get('path', '?')} names no pretraining data in its lineage: "
                      "give the prepared folder as bpb:DIR")


def check_same_ids(data_tokenizer: Tokenizer, tokenizer: Tokenizer, data_dir: Path, what: str = "bpb") -> None:
    if data_tokenizer.fingerprint == tokenizer.fingerprint:
        return
    if tokenizer.n_vocab < data_tokenizer.n_vocab or any(
            data_tokenizer.token_bytes(i) != tokenizer.token_bytes(i) for i in range(data_tokenizer.n_vocab)):
        raise TinyLMError(f"{what}: {data_dir} was tokenized with another tokenizer than the checkpoint's: "
                          "its dev ids mean other text to this model")


def checked_dev_data(data_dir: str | Path, tokenizer: Tokenizer, what: str = "bpb") -> Path:
    """A prepared data folder whose dev ids mean to `tokenizer` the text they were made from, or one line why not."""
    data_dir = Path(data_dir)
    if not (data_dir / "dev.bin").is_file() or not (data_dir / TOKENIZER).is_file():
        raise TinyLMError(f"{what}: {data_dir} is not a prepared data folder (no dev.bin and {TOKENIZER}); "
                          "make one with tinylm prepare")
    check_same_ids(load_tokenizer(data_dir / TOKENIZER), tokenizer, data_dir, what)
    return data_dir


@torch.no_grad()
def corpus_bpb(model: nn.Module, tokenizer: Tokenizer, data_dir: str | Path, batch_size: int = 8,
               max_batches: int = 20, seq_len: int | None = None) -> dict[str, float]:
    """{"bpb", "loss"} of `model` on the first `max_batches` dev batches of a prepared data folder."""

    data_dir = checked_dev_data(data_dir, tokenizer)
    device = next(model.parameters()).device
    seq_len = seq_len or model.config.context_length
    batches = list(iter_sequential(data_dir / "dev.bin", batch_size, seq_len, max_batches=max_batches))
    loss = evaluate(model, batches, device, torch.float32)
    sidecar = read_sidecar(data_dir, "dev")
    return {"bpb": bits_per_byte(loss, int(sidecar["tokens"]), int(sidecar["bytes"])), "loss": loss}
