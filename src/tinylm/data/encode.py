"""The encoding pass: documents -> split by hash -> ids in batches on all cores -> two shard writers.

Documents are gathered into batches of a few megabytes and encoded together, so tiktoken's threads
have enough work to keep both cores busy, while memory stays bounded however big the corpus is.
Each document is encoded as the pieces `cut_long_runs` gives (one piece, the document itself, for
ordinary text), the same pieces the BPE was trained on, so no pre-token costs quadratic time.
Progress counts UTF-8 bytes (so the percentage is right when the corpus size is known up front)
and tokens per second.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator

import numpy as np

from tinylm.data.long_runs import cut_long_runs
from tinylm.data.progress import Progress
from tinylm.data.split import is_dev
from tinylm.data.staging import ShardWriter
from tinylm.tokenizer.tokenizer import Tokenizer

BATCH_BYTES = 4 << 20
BATCH_DOCUMENTS = 4096


def encode_documents(tokenizer: Tokenizer, texts: list[str]) -> list[np.ndarray]:
    """Each text's ordinary ids (no special tokens), encoded piece by piece as `cut_long_runs` cuts it."""
    pieces: list[str] = []
    counts: list[int] = []
    for text in texts:
        parts = cut_long_runs(text)
        pieces += parts
        counts.append(len(parts))
    ids = tokenizer.encode_arrays(pieces)
    out: list[np.ndarray] = []
    start = 0
    for count in counts:
        out.append(ids[start] if count == 1 else np.concatenate(ids[start:start + count]))
        start += count
    return out


def _batches(documents: Iterable[str]) -> Iterator[list[tuple[str, bytes]]]:
    batch: list[tuple[str, bytes]] = []
    size = 0
    for text in documents:
        data = text.encode("utf-8")
        batch.append((text, data))
        size += len(data)
        if size >= BATCH_BYTES or len(batch) >= BATCH_DOCUMENTS:
            yield batch
            batch, size = [], 0
    if batch:
        yield batch


def encode_corpus(documents: Iterable[str], tokenizer: Tokenizer, train: ShardWriter, dev: ShardWriter,
                  dev_fraction: float, progress: Progress) -> None:
    """Encode every document into `train` or `dev` (chosen by `is_dev`), EOT after each."""
    for batch in _batches(documents):
        ids = encode_documents(tokenizer, [text for text, _ in batch])
        held_out = [is_dev(data, dev_fraction) for _, data in batch]
        for writer, wanted in ((train, False), (dev, True)):
            chosen = [i for i, flag in enumerate(held_out) if flag == wanted]
            writer.add([ids[i] for i in chosen], sum(len(batch[i][1]) for i in chosen))
        progress.update(sum(len(data) for _, data in batch), tokens=sum(len(a) + 1 for a in ids))
