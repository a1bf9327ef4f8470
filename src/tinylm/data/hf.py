"""Hugging Face datasets as a corpus: `--corpus hf:NAME[:CONFIG][:SPLIT]`.

NAME is a Hub dataset (`roneneldan/TinyStories`), a local folder of data files (`.jsonl`,
`.parquet`, ... which `datasets` reads with its packaged builders, no network), one such local file
(its kind picks the builder: json, parquet, csv, text, arrow; the file becomes split SPLIT), or a
folder written by `save_to_disk`. CONFIG may be empty (`hf:NAME::validation`); SPLIT defaults to
`train`. Hub datasets are streamed, so a 10 GB corpus never has to fit on disk twice; prepare reads the
stream twice (BPE training, then encoding). Each row's `--text-field` string is one document.

`datasets` is an optional extra. Without it, or offline (`HF_DATASETS_OFFLINE=1`/`HF_HUB_OFFLINE=1`,
or no network) for a dataset that is not local, prepare fails with one line and no traceback.
"""

from __future__ import annotations

import hashlib
import os
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from tinylm.data.corpus import Corpus, ReadStats
from tinylm.data.text import clean_string
from tinylm.errors import TinyLMError
from tinylm.paths import parse_hf_spec  # its home is the leaf paths.py, which names folders after the spec

FILE_BUILDERS = {".json": "json", ".jsonl": "json", ".parquet": "parquet", ".csv": "csv", ".txt": "text",
                 ".arrow": "arrow"}


def _offline() -> bool:
    return any(os.environ.get(v, "").lower() in ("1", "true", "yes", "on")
               for v in ("HF_DATASETS_OFFLINE", "HF_HUB_OFFLINE"))


def _one_line(exc: BaseException) -> str:
    lines = str(exc).strip().splitlines()
    return f"{type(exc).__name__}: {lines[0]}" if lines else type(exc).__name__


def _open(name: str, config: str | None, split: str) -> Any:
    """The dataset split as an iterable of row dicts (a saved folder, local files, or a Hub stream)."""
    import datasets  # optional extra: hf_corpus has checked it is installed

    folder = Path(name).expanduser()
    if (folder / "state.json").is_file() or (folder / "dataset_dict.json").is_file():
        loaded = datasets.load_from_disk(str(folder))
        if isinstance(loaded, datasets.DatasetDict):
            if split not in loaded:
                raise ValueError(f"Bad split: {split}. Available splits: {sorted(loaded)}")
            return loaded[split]
        return loaded
    if folder.is_file():  # one local file, read by the packaged builder for its kind
        builder = FILE_BUILDERS.get(folder.suffix.lower())
        if builder is None:
            kinds = ", ".join(sorted(FILE_BUILDERS))
            raise TinyLMError(f"hf:{name}: datasets has no builder for {folder.suffix or 'extensionless'} "
                              f"files (it reads {kinds})")
        return datasets.load_dataset(builder, data_files={split: str(folder)}, split=split, streaming=True)
    path = str(folder) if folder.is_dir() else name
    return datasets.load_dataset(path, config, split=split, streaming=True)


def _fingerprint(spec: str, name: str) -> str:
    folder = Path(name).expanduser()
    listing = spec
    if folder.exists():
        files = [folder] if folder.is_file() else sorted(p for p in folder.rglob("*") if p.is_file())
        listing += "".join(f"\n{p.as_posix()}\t{p.stat().st_size}\t{p.stat().st_mtime_ns}" for p in files)
    return hashlib.sha256(listing.encode("utf-8", "surrogateescape")).hexdigest()


def hf_corpus(spec: str, text_field: str = "text") -> Corpus:
    name, config, split = parse_hf_spec(spec)
    try:
        import datasets  # optional extra: pip install 'tinylm[datasets]'
    except ImportError:
        raise TinyLMError(f"--corpus {spec} needs the datasets library: "
                          "pip install 'tinylm[datasets]'") from None
    datasets.disable_progress_bars()
    datasets.logging.set_verbosity_error()
    where = f"hf:{name}"

    def fail(exc: Exception) -> TinyLMError:
        hint = " (offline: HF_DATASETS_OFFLINE/HF_HUB_OFFLINE is set)" if _offline() else ""
        return TinyLMError(f"cannot read Hugging Face dataset {name!r}{hint}: {_one_line(exc)}")

    try:
        dataset = _open(name, config, split)
    except TinyLMError:
        raise
    except Exception as exc:  # noqa: BLE001 - datasets raises many types (network, missing, bad split)
        raise fail(exc) from None

    def read(stats: ReadStats) -> Iterator[str]:
        rows = iter(dataset)
        number = 0
        while True:
            try:
                row = next(rows)
            except StopIteration:
                return
            except Exception as exc:  # noqa: BLE001 - a stream can fail midway (network, bad file)
                raise fail(exc) from None
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

    canonical = f"hf:{name}:{config or ''}:{split}"
    return Corpus(spec=canonical, fingerprint=_fingerprint(canonical, name), read=read)
