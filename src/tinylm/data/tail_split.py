"""The fallback split: when hashing documents leaves a split shorter than a window, dev is the tail of the tokens.

Hashing each document (`split.py`) is the rule, but it needs many documents: a folder of five files
at `--dev-fraction 0.01` has no dev document in 95% of cases, and a corpus with one document can
never fill both splits. Rather than refuse the most common first corpus ("train on my .txt"),
prepare then re-splits the tokens it has written: the train shard followed by the dev shard is one
stream, and its last `dev_tail_length` tokens become the dev split (`--dev-fraction` of them, at
least one context window), the rest the train split. The documents hashed into dev, if any, sit at
the end of the stream and so stay in dev; the cut itself falls inside a document. It is still a
pure function of the corpus and the options, so the shards stay byte-identical from run to run.
The sidecars say `"dev_split": "tail"`, and prepare prints a line, since a tail is a weaker held-out
set than whole unseen documents (and the BPE was trained on that text).
"""

from __future__ import annotations

import math

import numpy as np

from tinylm.data.staging import ShardWriter
from tinylm.tokenizer.tokenizer import Tokenizer


def needs_tail(train: ShardWriter, dev: ShardWriter, window: int) -> bool:
    """True when the hash split left either split shorter than one window (documents plus EOTs)."""
    return train.tokens < window or dev.tokens < window


def dev_tail_length(total: int, dev_fraction: float, window: int) -> int:
    """How many of the stream's `total` tokens the dev tail takes: `dev_fraction` of them, at least a window."""
    return max(window, math.ceil(dev_fraction * total))


def split_as_tail(train: ShardWriter, dev: ShardWriter, tokenizer: Tokenizer,
                  dev_fraction: float, window: int) -> tuple[ShardWriter, ShardWriter]:
    """Rewrite the two closed shards as one stream cut `dev_tail_length` tokens before its end."""
    stream = np.concatenate([np.fromfile(writer.path, dtype=writer.dtype) for writer in (train, dev)])
    text_bytes = train.bytes + dev.bytes
    cut = len(stream) - dev_tail_length(len(stream), dev_fraction, window)
    tail = stream[cut:]
    # byte-level tokens decode to exactly the text they encode, so the tail's bytes are its tokens' bytes
    tail_bytes = len(tokenizer.decode_bytes(tail[tail != tokenizer.eot_id].tolist()))
    parts = []
    for writer, tokens, n_bytes in ((train, stream[:cut], text_bytes - tail_bytes), (dev, tail, tail_bytes)):
        part = ShardWriter(writer.path, writer.dtype, tokenizer.eot_id)  # reopening truncates the file
        try:
            part.add_stream(tokens, n_bytes)
        finally:
            part.close()
        parts.append(part)
    return parts[0], parts[1]
