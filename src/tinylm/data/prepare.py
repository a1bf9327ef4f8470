"""`prepare_dataset`: corpus -> tokenizer -> train/dev token shards in a data folder.

1. Open the corpus and resolve the output folder and the tokenizer (r50k or a file is loaded now,
   so a missing file fails before any work). Hash the whole config, including a cheap fingerprint
   of the corpus content: an identical earlier prepare in the folder is reused as is; a complete
   one with another config is refused unless `force`; leftovers of an interrupted one are replaced.
   Documents longer than `max_document_chars` are cut at line breaks (`chunks.py`) before anything
   else sees them, so one big file is many documents.
2. `bpe` (or `bpe-digits`, which cuts numbers into single digits first): train a byte-level BPE on
   the train split's documents (the first `TOKENIZER_TRAIN_BYTES` of them on huge corpora, where a
   sample gives the same merges at a fraction of the time; they are held in memory while training,
   which is faster than streaming them), as the pieces `long_runs.py` cuts them into; on the
   held-out ones if the hash put every document there. A corpus that is mostly U+FFFD is refused here
   (`corpus_report.py`).
3. Encode every document into the train or dev shard (by the document's hash), EOT after each.
4. Check the result (text at all, at least one context window per split, or else the dev split as
   the tail of the tokens: `tail_split.py`), write the sidecars and tokenizer.json as staged files,
   and rename everything into place (see `staging.py`); on any failure, a read-only or full disk
   included, the staged files go and the error is one line. Only then print what the user should
   know about the input (skipped files, replaced bytes, a tail split): a line each, even without
   progress.

Nothing depends on time, machine or thread scheduling, so the same corpus and config give
byte-identical shards.
"""

from __future__ import annotations

import hashlib
import json
import sys
import time
from collections.abc import Iterable
from pathlib import Path
from typing import Any

from tinylm.data.chunks import MAX_DOCUMENT_CHARS, cut_documents
from tinylm.data.corpus import Corpus
from tinylm.data.corpus_report import check_replacements, replacement_note, skipped_note
from tinylm.data.encode import encode_corpus
from tinylm.data.folders import default_data_dir
from tinylm.data.long_runs import MAX_RUN_CHARS, cut_long_runs
from tinylm.data.progress import Heartbeat, Progress
from tinylm.data.shards import SPLITS, TOKENIZER_FILE, check_data_dir, shard_dtype
from tinylm.data.sources import open_corpus
from tinylm.data.split import is_dev
from tinylm.data.staging import ShardWriter, Staging
from tinylm.data.tail_split import dev_tail_length, needs_tail, split_as_tail
from tinylm.errors import TinyLMError
from tinylm.tokenizer.load import load_tokenizer
from tinylm.tokenizer.r50k import load_r50k
from tinylm.tokenizer.tokenizer import Tokenizer
from tinylm.tokenizer.train import check_vocab_size

FORMAT = 1
TOKENIZER_TRAIN_BYTES = 1 << 30
TRAINED = {"bpe": False, "bpe-digits": True}  # the tokenizers trained here, and whether each splits digits


def _say(message: str | None, enabled: bool = True) -> None:
    """A `prepare:` line on stderr: status lines only with progress, notes about the input always."""
    if enabled and message:
        print(f"prepare: {message}", file=sys.stderr, flush=True)


def _check_options(tokenizer: str, vocab_size: int, dev_fraction: float, context_length: int,
                   max_document_chars: int) -> None:
    if tokenizer in TRAINED:
        check_vocab_size(vocab_size)
    number = isinstance(dev_fraction, int | float) and not isinstance(dev_fraction, bool)
    if not number or not 0 < dev_fraction < 1:
        raise TinyLMError(f"--dev-fraction must be between 0 and 1 (exclusive), got {dev_fraction!r}")
    if isinstance(context_length, bool) or not isinstance(context_length, int) or context_length < 1:
        raise TinyLMError(f"--context-length must be a positive integer, got {context_length!r}")
    if isinstance(max_document_chars, bool) or not isinstance(max_document_chars, int) or max_document_chars < 0:
        raise TinyLMError(f"--max-document-chars must be a whole number (0: never cut), got {max_document_chars!r}")


def _fixed_tokenizer(spec: str) -> Tokenizer | None:
    """The tokenizer for `r50k` or a tokenizer.json path, None for `bpe` or `bpe-digits` (trained later)."""
    if spec in TRAINED:
        return None
    if spec == "r50k":
        return load_r50k()
    if not Path(spec).expanduser().exists():
        raise TinyLMError(f"--tokenizer {spec}: not bpe, bpe-digits, r50k or an existing tokenizer.json file "
                          "or folder")
    return load_tokenizer(Path(spec).expanduser())


def prepare_config(source: Corpus, tokenizer: str, fixed: Tokenizer | None, vocab_size: int,
                   dev_fraction: float, text_field: str, max_document_chars: int) -> dict[str, Any]:
    """Everything the shards depend on; its hash decides reuse."""
    if fixed is None:
        tokenizer_id: dict[str, Any] = {"tokenizer": tokenizer, "vocab_size": vocab_size}
    else:
        tokenizer_id = {"tokenizer": fixed.name, "tokenizer_sha256": fixed.fingerprint}
    return {"format": FORMAT, "corpus": source.spec, "corpus_fingerprint": source.fingerprint, **tokenizer_id,
            "dev_fraction": float(dev_fraction), "text_field": text_field,
            "max_document_chars": max_document_chars, "max_run_chars": MAX_RUN_CHARS}


def config_hash(config: dict[str, Any]) -> str:
    return hashlib.sha256(json.dumps(config, sort_keys=True).encode("utf-8")).hexdigest()[:16]


def _describe_change(old: dict[str, Any], new: dict[str, Any]) -> str:
    changed = sorted(key for key in set(old) | set(new) if old.get(key) != new.get(key))
    parts = ["the corpus content changed" if key == "corpus_fingerprint" else f"{key} {old.get(key)!r} -> "
             f"{new.get(key)!r}" for key in changed]
    return ", ".join(parts) or "another config"


def _tokenizer_texts(documents: Iterable[str], dev_fraction: float, bar: Progress) -> tuple[list[str], list[str]]:
    """(train documents, held-out documents), each up to TOKENIZER_TRAIN_BYTES of text."""
    kept: tuple[list[str], list[str]] = ([], [])
    room = [TOKENIZER_TRAIN_BYTES, TOKENIZER_TRAIN_BYTES]
    for text in documents:
        data = text.encode("utf-8")
        bar.update(len(data))
        side = int(is_dev(data, dev_fraction))
        if room[side] > 0:
            kept[side].append(text)
            room[side] -= len(data)
        if room[0] <= 0:
            break
    return kept


def _train_tokenizer(source: Corpus, vocab_size: int, split_digits: bool, dev_fraction: float,
                     max_document_chars: int, allow_invalid_utf8: bool, progress: bool) -> Tokenizer:
    # looked up per call, not at the top: tests/test_data_long_runs.py spies on tinylm.tokenizer.train.train_bpe
    from tinylm.tokenizer.train import train_bpe

    start = time.perf_counter()
    with Progress("read", source.total_bytes, progress) as bar:
        train_texts, held_out = _tokenizer_texts(cut_documents(source.documents(), max_document_chars),
                                                 dev_fraction, bar)
    check_replacements(source, allow_invalid_utf8)
    # no document hashed into train (a corpus of one or two): the dev split will be a tail, so learn from all
    texts = train_texts or held_out
    if not texts:
        _no_text(source)
    pieces = [piece for text in texts for piece in cut_long_runs(text)]  # a list trains faster than a generator
    size = sum(len(piece) for piece in pieces)
    digits = " (digits split one by one)" if split_digits else ""
    _say(f"training a {vocab_size}-token BPE{digits} on {len(texts)} documents ({size / 1e6:,.1f} M characters)",
         progress)
    with Heartbeat("training the BPE", progress):
        tokenizer = train_bpe(pieces, vocab_size, progress=progress and sys.stderr.isatty(), split_digits=split_digits)
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


def _settle_splits(source: Corpus, tokenizer: Tokenizer, train: ShardWriter, dev: ShardWriter,
                   dev_fraction: float, context_length: int) -> tuple[ShardWriter, ShardWriter, str | None]:
    """(train, dev, a note or None): the hash split if each split holds a window, else dev as the tail."""
    if train.documents + dev.documents == 0:
        _no_text(source)
    window = context_length + 1
    if not needs_tail(train, dev, window):
        return train, dev, None
    total = train.tokens + dev.tokens
    if total - dev_tail_length(total, dev_fraction, window) < window:
        raise TinyLMError(f"corpus {source.spec} is too small: {total:,} tokens, fewer than the two windows of "
                          f"{window} (--context-length {context_length} + 1) that a train and a dev split need")
    documents = train.documents + dev.documents
    tail_train, tail_dev = split_as_tail(train, dev, tokenizer, dev_fraction, window)
    note = (f"hashing held out {dev.documents} of {documents} documents at --dev-fraction {dev_fraction}, leaving "
            f"a split shorter than one window of {window} tokens: the dev split is the last {tail_dev.tokens:,} "
            f"tokens of the corpus instead (train: the first {tail_train.tokens:,})")
    return tail_train, tail_dev, note


def _sidecar(split: str, writer: ShardWriter, tokenizer: Tokenizer, source: Corpus, config: dict[str, Any],
             digest: str, dev_split: str) -> dict[str, Any]:
    return {
        "format": FORMAT, "split": split, "corpus": source.spec, "tokenizer": tokenizer.name,
        "tokenizer_file": TOKENIZER_FILE, "vocab_size": tokenizer.vocab_size, "n_vocab": tokenizer.n_vocab,
        "eot_id": tokenizer.eot_id, "dtype": writer.dtype.name, "tokens": writer.tokens,
        "documents": writer.documents, "bytes": writer.bytes, "sha256": writer.sha256, "config_hash": digest,
        "config": config, "dev_split": dev_split, "corpus_replaced_documents": source.stats.replaced,
        "corpus_empty_documents": source.stats.empty, "corpus_characters": source.stats.characters,
        "corpus_replacement_characters": source.stats.replacements, "corpus_skipped_files": len(source.skipped),
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
                    text_field: str = "text", progress: bool = True, context_length: int = 256,
                    max_document_chars: int = MAX_DOCUMENT_CHARS, allow_invalid_utf8: bool = False) -> Path:
    """Tokenize `corpus` into a data folder (default: `default_data_dir(...)`) and return that folder.

    `tokenizer` is "bpe" (trained here, `vocab_size` tokens), "bpe-digits" (the same, numbers split into
    single digits first), "r50k" or a tokenizer.json path. Documents longer than `max_document_chars` are
    cut at line breaks (0: never). A corpus whose tokens cannot fill two windows of `context_length + 1`
    (train and dev), or whose text is more than 10% U+FFFD (unless `allow_invalid_utf8`), is refused. Errors
    are `TinyLMError`s and leave any earlier dataset in the folder untouched.
    """
    start = time.perf_counter()
    _check_options(tokenizer, vocab_size, dev_fraction, context_length, max_document_chars)
    source = open_corpus(corpus, text_field)
    out_dir = Path(out).expanduser() if out is not None else default_data_dir(corpus, tokenizer, vocab_size)
    fixed = _fixed_tokenizer(tokenizer)
    config = prepare_config(source, tokenizer, fixed, vocab_size, dev_fraction, text_field, max_document_chars)
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
        tok = fixed or _train_tokenizer(source, vocab_size, TRAINED[tokenizer], dev_fraction, max_document_chars,
                                        allow_invalid_utf8, progress)
        dtype = shard_dtype(tok.n_vocab)
        for split in SPLITS:
            writers.append(ShardWriter(staging.path(f"{split}.bin"), dtype, tok.eot_id))
        train, dev = writers
        with Progress("encode", source.total_bytes, progress) as bar:
            encode_corpus(cut_documents(source.documents(), max_document_chars), tok, train, dev, dev_fraction, bar)
        for writer in writers:
            writer.close()
        check_replacements(source, allow_invalid_utf8)
        train, dev, tail_note = _settle_splits(source, tok, train, dev, dev_fraction, context_length)
        writers = [train, dev]
        staging.path(TOKENIZER_FILE).write_text(tok.to_json(), encoding="utf-8")
        for split, writer in zip(SPLITS, writers):
            sidecar = _sidecar(split, writer, tok, source, config, digest, "tail" if tail_note else "hash")
            staging.path(f"{split}.json").write_text(json.dumps(sidecar, indent=2) + "\n", encoding="utf-8")
        staging.commit(sidecars=[f"{split}.json" for split in SPLITS])
    except BaseException as exc:
        for writer in writers:
            writer.close()
        staging.discard()
        if isinstance(exc, OSError):  # a full disk or a read-only folder: the user's to fix, not a bug
            raise TinyLMError(f"cannot write the dataset to {out_dir}: {exc.strerror or exc}") from None
        raise
    for note in (skipped_note(source), replacement_note(source), tail_note):
        _say(note)
    _say(f"{out_dir}: train {train.tokens:,} tokens ({train.documents} documents), dev {dev.tokens:,} tokens "
         f"({dev.documents} documents), {time.perf_counter() - start:.1f} s", progress)
    return out_dir
