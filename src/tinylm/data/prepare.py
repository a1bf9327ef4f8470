"""`prepare_dataset`: corpus -> tokenizer -> train/dev token shards in a data folder.

1. Open the corpus and resolve the output folder and the tokenizer (r50k or a file is loaded now,
   so a missing file fails before any work). Hash the whole config, including a cheap fingerprint
   of the corpus content: an identical earlier prepare in the folder is reused as is; a complete
   one with another config is refused unless `force`; leftovers of an interrupted one are replaced.
2. `bpe`: train a byte-level BPE on the train split's documents (the first `TOKENIZER_TRAIN_BYTES`
   of them on huge corpora, where a sample gives the same merges at a fraction of the time; they are
   held in memory while training, which is faster than streaming them).
3. Encode every document into the train or dev shard (by the document's hash), EOT after each.
4. Check the result (text at all, a dev document, at least one context window per split), write the
   sidecars and tokenizer.json, and rename everything into place (see `staging.py`).

Nothing depends on time, machine or thread scheduling, so the same corpus and config give
byte-identical shards.
"""

from __future__ import annotations

import hashlib
import json
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from tinylm.data.corpus import Corpus, open_corpus
from tinylm.data.encode import encode_corpus
from tinylm.data.paths import default_data_dir
from tinylm.data.shards import SPLITS, TOKENIZER_FILE, check_data_dir, shard_dtype
from tinylm.data.split import is_dev
from tinylm.data.staging import ShardWriter, Staging
from tinylm.errors import TinyLMError
from tinylm.tokenizer.tokenizer import Tokenizer

FORMAT = 1
TOKENIZER_TRAIN_BYTES = 1 << 30


def _say(message: str, enabled: bool) -> None:
    if enabled:
        print(f"prepare: {message}", file=sys.stderr, flush=True)


def _check_options(tokenizer: str, vocab_size: int, dev_fraction: float, context_length: int) -> None:
    from tinylm.tokenizer.train import check_vocab_size

    if tokenizer == "bpe":
        check_vocab_size(vocab_size)
    number = isinstance(dev_fraction, int | float) and not isinstance(dev_fraction, bool)
    if not number or not 0 < dev_fraction < 1:
        raise TinyLMError(f"--dev-fraction must be between 0 and 1 (exclusive), got {dev_fraction!r}")
    if isinstance(context_length, bool) or not isinstance(context_length, int) or context_length < 1:
        raise TinyLMError(f"--context-length must be a positive integer, got {context_length!r}")


def _fixed_tokenizer(spec: str) -> Tokenizer | None:
    """The tokenizer for `r50k` or a tokenizer.json path, None for `bpe` (trained later)."""
    if spec == "bpe":
        return None
    if spec == "r50k":
        from tinylm.tokenizer.r50k import load_r50k

        return load_r50k()
    if not Path(spec).expanduser().exists():
        raise TinyLMError(f"--tokenizer {spec}: not bpe, r50k or an existing tokenizer.json file or folder")
    from tinylm.tokenizer import load_tokenizer

    return load_tokenizer(Path(spec).expanduser())


def prepare_config(source: Corpus, tokenizer: str, fixed: Tokenizer | None, vocab_size: int,
                   dev_fraction: float, text_field: str) -> dict[str, Any]:
    """Everything the shards depend on; its hash decides reuse."""
    if fixed is None:
        tokenizer_id: dict[str, Any] = {"tokenizer": "bpe", "vocab_size": vocab_size}
    else:
        tokenizer_id = {"tokenizer": fixed.name, "tokenizer_sha256": fixed.fingerprint}
    return {"format": FORMAT, "corpus": source.spec, "corpus_fingerprint": source.fingerprint, **tokenizer_id,
            "dev_fraction": float(dev_fraction), "text_field": text_field}


def config_hash(config: dict[str, Any]) -> str:
    return hashlib.sha256(json.dumps(config, sort_keys=True).encode("utf-8")).hexdigest()[:16]


def _describe_change(old: dict[str, Any], new: dict[str, Any]) -> str:
    changed = sorted(key for key in set(old) | set(new) if old.get(key) != new.get(key))
    parts = ["the corpus content changed" if key == "corpus_fingerprint" else f"{key} {old.get(key)!r} -> "
             f"{new.get(key)!r}" for key in changed]
    return ", ".join(parts) or "another config"


def _train_texts(source: Corpus, dev_fraction: float, seen: list[int]) -> Iterator[str]:
    """The train split's documents, up to TOKENIZER_TRAIN_BYTES of them; `seen` counts all documents."""
    budget = TOKENIZER_TRAIN_BYTES
    for text in source.documents():
        seen[0] += 1
        data = text.encode("utf-8")
        if is_dev(data, dev_fraction):
            continue
        yield text
        budget -= len(data)
        if budget <= 0:
            return


def _train_tokenizer(source: Corpus, vocab_size: int, dev_fraction: float, progress: bool) -> Tokenizer:
    from tinylm.tokenizer.train import train_bpe

    start = time.perf_counter()
    seen = [0]
    texts = list(_train_texts(source, dev_fraction, seen))  # a list trains faster than a generator
    if not texts:
        if seen[0]:
            raise TinyLMError(f"the train split of {source.spec} got no document (all {seen[0]} went to dev "
                              f"with --dev-fraction {dev_fraction}): lower --dev-fraction or add documents")
        _no_text(source)
    tokenizer = train_bpe(texts, vocab_size, progress=progress and sys.stderr.isatty())
    short = tokenizer.n_vocab != vocab_size
    note = f" (asked for {vocab_size}: the corpus has no more pairs)" if short else ""
    _say(f"trained a {tokenizer.n_vocab}-token BPE on {len(texts)} documents in "
         f"{time.perf_counter() - start:.1f} s{note}", progress)
    return tokenizer


def _no_text(source: Corpus) -> None:
    if source.stats.empty:
        raise TinyLMError(f"corpus {source.spec} has no text: all {source.stats.empty} documents are empty "
                          "or whitespace")
    raise TinyLMError(f"corpus {source.spec} has no documents")


def _check_result(source: Corpus, train: ShardWriter, dev: ShardWriter, dev_fraction: float,
                  context_length: int) -> None:
    """The bad-input rules that need the text read: no text, no dev document, shorter than a window."""
    if train.documents + dev.documents == 0:
        _no_text(source)
    window = context_length + 1
    if train.documents == 0:
        raise TinyLMError(f"the train split of {source.spec} got no document (all {dev.documents} went to "
                          f"dev with --dev-fraction {dev_fraction}): lower --dev-fraction or add documents")
    if dev.documents == 0:
        raise TinyLMError(f"the dev split of {source.spec} got no document ({train.documents} documents, "
                          f"--dev-fraction {dev_fraction}): raise --dev-fraction or add documents "
                          "(a text file is one document; .jsonl holds one per line)")
    if train.tokens < window:
        raise TinyLMError(f"corpus {source.spec} is too small: its train split has {train.tokens} tokens, "
                          f"fewer than one window of {window} (--context-length {context_length} + 1)")
    if dev.tokens < window:
        raise TinyLMError(f"the dev split of {source.spec} has {dev.tokens} tokens, fewer than one context "
                          f"window of {window} (--context-length {context_length} + 1): raise --dev-fraction")


def _sidecar(split: str, writer: ShardWriter, tokenizer: Tokenizer, source: Corpus, config: dict[str, Any],
             digest: str) -> dict[str, Any]:
    return {
        "format": FORMAT, "split": split, "corpus": source.spec, "tokenizer": tokenizer.name,
        "tokenizer_file": TOKENIZER_FILE, "vocab_size": tokenizer.vocab_size, "n_vocab": tokenizer.n_vocab,
        "eot_id": tokenizer.eot_id, "dtype": writer.dtype.name, "tokens": writer.tokens,
        "documents": writer.documents, "bytes": writer.bytes, "sha256": writer.sha256, "config_hash": digest,
        "config": config, "corpus_replaced_documents": source.stats.replaced,
        "corpus_empty_documents": source.stats.empty,
    }


def _existing(out_dir: Path) -> dict[str, dict[str, Any]] | None:
    """The sidecars of a complete dataset already in `out_dir`, else None."""
    if out_dir.exists() and not out_dir.is_dir():
        raise TinyLMError(f"--out {out_dir} exists and is not a folder")
    try:
        return check_data_dir(out_dir)
    except TinyLMError:
        return None


def prepare_dataset(corpus: str = "pystdlib", tokenizer: str = "bpe", vocab_size: int = 4096,
                    out: str | Path | None = None, force: bool = False, dev_fraction: float = 0.01,
                    text_field: str = "text", progress: bool = True, context_length: int = 256) -> Path:
    """Tokenize `corpus` into a data folder (default: `default_data_dir(...)`) and return that folder.

    `tokenizer` is "bpe" (trained here, `vocab_size` tokens), "r50k" or a tokenizer.json path. A corpus
    whose splits are shorter than `context_length + 1` tokens is refused. Errors are `TinyLMError`s and
    leave any earlier dataset in the folder untouched.
    """
    start = time.perf_counter()
    _check_options(tokenizer, vocab_size, dev_fraction, context_length)
    source = open_corpus(corpus, text_field)
    out_dir = Path(out).expanduser() if out is not None else default_data_dir(corpus, tokenizer, vocab_size)
    fixed = _fixed_tokenizer(tokenizer)
    config = prepare_config(source, tokenizer, fixed, vocab_size, dev_fraction, text_field)
    digest = config_hash(config)

    existing = _existing(out_dir)
    if existing is not None:
        if existing["train"]["config_hash"] == digest:
            _say(f"{out_dir} is up to date (reused)", progress)
            return out_dir
        if not force:
            change = _describe_change(existing["train"].get("config", {}), config)
            raise TinyLMError(f"{out_dir} already holds a dataset prepared differently ({change}): "
                              "pass --force to replace it, or choose another --out")

    try:
        staging = Staging(out_dir)
    except OSError as exc:
        raise TinyLMError(f"cannot create the output folder {out_dir}: {exc.strerror or exc}") from None
    writers: list[ShardWriter] = []
    try:
        tok = fixed or _train_tokenizer(source, vocab_size, dev_fraction, progress)
        dtype = shard_dtype(tok.n_vocab)
        for split in SPLITS:
            writers.append(ShardWriter(staging.path(f"{split}.bin"), dtype, tok.eot_id))
        train, dev = writers
        encode_corpus(source, tok, train, dev, dev_fraction, progress)
        for writer in writers:
            writer.close()
        _check_result(source, train, dev, dev_fraction, context_length)
        tok.save(staging.path(TOKENIZER_FILE))
        for split, writer in zip(SPLITS, writers):
            sidecar = _sidecar(split, writer, tok, source, config, digest)
            staging.path(f"{split}.json").write_text(json.dumps(sidecar, indent=2) + "\n", encoding="utf-8")
        staging.commit(sidecars=[f"{split}.json" for split in SPLITS])
    except BaseException as exc:
        for writer in writers:
            writer.close()
        staging.discard()
        if isinstance(exc, OSError):  # a full disk or a read-only folder: the user's to fix, not a bug
            raise TinyLMError(f"cannot write the dataset to {out_dir}: {exc.strerror or exc}") from None
        raise
    _say(f"{out_dir}: train {train.tokens:,} tokens ({train.documents} documents), dev {dev.tokens:,} tokens "
         f"({dev.documents} documents), {time.perf_counter() - start:.1f} s", progress)
    return out_dir
