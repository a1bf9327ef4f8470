"""Pretraining's preview: a prepared data folder (train.bin, through its own tokenizer) or a corpus (a file,
folder or glob of text, or pystdlib) through a run's tokenizer, cut into windows: every token learns."""

from __future__ import annotations

from pathlib import Path

from tinylm.data.rows.hf_spec import is_hf_spec
from tinylm.data.shards import open_shard
from tinylm.data.sources import open_corpus
from tinylm.errors import TinyLMError
from tinylm.stages.preview_rows import DataPreview, PreviewRow
from tinylm.tasks.registry import PREFIX as BUILTIN_PREFIX
from tinylm.tokenizer.load import load_tokenizer
from tinylm.tokenizer.tokenizer import Tokenizer

WINDOW = 128  # tokens per row shown


def text_preview(spec: str, tokenizer: Tokenizer | None, limit: int, seed: int, window: int = WINDOW
                 ) -> DataPreview:
    """Windows of `window` tokens from a prepared folder's train.bin, or from a corpus encoded by `tokenizer`."""
    local = not spec.startswith(BUILTIN_PREFIX) and not is_hf_spec(spec) and spec != "pystdlib"
    folder = Path(spec) if local else None
    if folder is not None and (folder / "train.bin").is_file():
        tokens, _ = open_shard(folder / "train.bin")
        tokenizer = load_tokenizer(folder)
        ids = [int(i) for i in tokens[: window * limit]]
        note = f"{folder.name}/train.bin, through the folder's own tokenizer"
    else:
        if tokenizer is None:
            raise TinyLMError("a corpus preview needs a tokenizer: choose a run")
        ids = []
        for document in open_corpus(spec).documents():
            ids += [tokenizer.eot_id, *tokenizer.encode_ordinary(document)]
            if len(ids) >= window * limit:
                break
        note = f"documents of {spec}, each after <|endoftext|>, through {tokenizer.name}"
    rows = [PreviewRow(f"window {n + 1}", ids[start:start + window], [1] * len(ids[start:start + window]))
            for n, start in enumerate(range(0, min(len(ids), window * limit), window))]
    return DataPreview(tokenizer, rows, [note])
