"""Hugging Face datasets as a corpus: `--corpus hf:NAME[:CONFIG][:SPLIT]`.

The spec's grammar and how the split is opened (a Hub dataset, a local folder or file, a
`save_to_disk` folder) are the row reader's (`rows/hf_spec.py`, `rows/hf_dataset.py`); a corpus is
streamed, so a 10 GB corpus never has to fit on disk twice, and prepare reads the stream twice (BPE
training, then encoding). Each row's `--text-field` string is one document.

`datasets` is an optional extra. Without it, or offline (`HF_DATASETS_OFFLINE=1`/`HF_HUB_OFFLINE=1`,
or no network) for a dataset that is not local, prepare fails with one line and no traceback.
"""

from __future__ import annotations

import hashlib
from collections.abc import Iterator
from pathlib import Path

from tinylm.data.corpus import Corpus, ReadStats
from tinylm.data.rows.hf_dataset import hf_failure, open_hf
from tinylm.data.rows.hf_spec import HF_PREFIX
from tinylm.data.text import clean_string
from tinylm.errors import TinyLMError


def _fingerprint(spec: str, name: str) -> str:
    folder = Path(name).expanduser()
    listing = spec
    if folder.exists():
        files = [folder] if folder.is_file() else sorted(p for p in folder.rglob("*") if p.is_file())
        listing += "".join(f"\n{p.as_posix()}\t{p.stat().st_size}\t{p.stat().st_mtime_ns}" for p in files)
    return hashlib.sha256(listing.encode("utf-8", "surrogateescape")).hexdigest()


def hf_corpus(spec: str, text_field: str = "text") -> Corpus:
    hf, dataset = open_hf(spec, "train", streaming=True)
    where = f"{HF_PREFIX}{hf.name}"

    def read(stats: ReadStats) -> Iterator[str]:
        rows = iter(dataset)
        number = 0
        while True:
            try:
                row = next(rows)
            except StopIteration:
                return
            except Exception as exc:  # noqa: BLE001 - a stream can fail midway (network, bad file)
                raise hf_failure(spec, hf, exc) from None
            number += 1
            if text_field not in row:
                raise TinyLMError(f"{where} row {number}: no {text_field!r} field (found: {', '.join(row)}); "
                                  "choose one with --text-field")
            value = row[text_field]
            if value is None:
                continue
            if not isinstance(value, str):
                raise TinyLMError(f"{where} row {number}: field {text_field!r} holds {type(value).__name__}, "
                                  "not text")
            text, fixed = clean_string(value)
            stats.replaced += fixed
            yield text

    return Corpus(spec=hf.canonical, fingerprint=_fingerprint(hf.canonical, hf.name), read=read)
