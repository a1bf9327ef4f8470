"""The encoding pass: documents -> split by hash -> ids in batches on all cores -> two shard writers.

Documents are gathered into batches of a few megabytes and encoded together, so tiktoken's threads
have enough work to keep both cores busy, while memory stays bounded however big the corpus is.
The progress bar counts UTF-8 bytes (so the ETA is right when the corpus size is known up front)
and shows tokens per second.
"""

from __future__ import annotations

import sys
import time
from collections.abc import Iterator

from tinylm.data.corpus import Corpus
from tinylm.data.split import is_dev
from tinylm.data.staging import ShardWriter
from tinylm.tokenizer.tokenizer import Tokenizer

BATCH_BYTES = 4 << 20
BATCH_DOCUMENTS = 4096


def progress_bar(total: int | None, desc: str, enabled: bool):
    """A tqdm bar on stderr, shown only when asked for and stderr is a terminal."""
    from tqdm import tqdm

    return tqdm(total=total, desc=desc, unit="B", unit_scale=True, unit_divisor=1024, file=sys.stderr,
                disable=not (enabled and sys.stderr.isatty()), leave=False)


def _batches(corpus: Corpus) -> Iterator[list[tuple[str, bytes]]]:
    batch: list[tuple[str, bytes]] = []
    size = 0
    for text in corpus.documents():
        data = text.encode("utf-8")
        batch.append((text, data))
        size += len(data)
        if size >= BATCH_BYTES or len(batch) >= BATCH_DOCUMENTS:
            yield batch
            batch, size = [], 0
    if batch:
        yield batch


def encode_corpus(corpus: Corpus, tokenizer: Tokenizer, train: ShardWriter, dev: ShardWriter,
                  dev_fraction: float, progress: bool = True) -> None:
    """Encode every document of `corpus` into `train` or `dev` (chosen by `is_dev`), EOT after each."""
    start = time.perf_counter()
    with progress_bar(corpus.total_bytes, "encode", progress) as bar:
        for batch in _batches(corpus):
            ids = tokenizer.encode_arrays([text for text, _ in batch])
            held_out = [is_dev(data, dev_fraction) for _, data in batch]
            for writer, wanted in ((train, False), (dev, True)):
                chosen = [i for i, flag in enumerate(held_out) if flag == wanted]
                writer.add([ids[i] for i in chosen], sum(len(batch[i][1]) for i in chosen))
            bar.update(sum(len(data) for _, data in batch))
            rate = (train.tokens + dev.tokens) / max(time.perf_counter() - start, 1e-9)
            bar.set_postfix_str(f"{rate / 1e6:.2f}M tok/s", refresh=False)
