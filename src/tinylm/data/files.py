"""Local corpora: a file, a folder (searched recursively) or a glob.

File kinds, by extension (case-insensitive):
- `.txt`, `.md`, `.py`: the whole file is one document (read by the rule in `text.py`);
- `.jsonl`: one document per line, the string in field `text_field` (`--text-field`, default
  "text"); blank lines are skipped, anything else that is not a JSON object with that string is an
  error naming the file and line;
- `.parquet`: one document per row of column `text_field`, null cells skipped (needs `pyarrow`).

A folder contributes every file of those kinds below it, skipping hidden names (`.git`, `.venv`);
a glob (`data/**/*.jsonl`) every matching file of those kinds. Files of other kinds are skipped
and listed in `Corpus.skipped`, which prepare reports, so a folder of `.csv` and `.txt` files never
silently loses half its text. Files are read in sorted order of their path, so the corpus has the
same order on every machine. The fingerprint is the list of (path, size, modification time), which
is cheap and changes whenever a file does.
"""

from __future__ import annotations

import glob
import hashlib
import json
import os
from collections.abc import Iterator
from pathlib import Path
from typing import BinaryIO

from tinylm.data.corpus import Corpus, ReadStats
from tinylm.data.text import clean_string, decode_text, read_text_file
from tinylm.errors import TinyLMError

TEXT_SUFFIXES = (".txt", ".md", ".py")
SUPPORTED = (*TEXT_SUFFIXES, ".jsonl", ".parquet")


def _kind(path: Path) -> str:
    return path.suffix.lower()


def _visible(path: Path, root: Path) -> bool:
    return not any(part.startswith(".") for part in path.relative_to(root).parts)


def corpus_files(spec: str) -> tuple[list[Path], list[Path]]:
    """(the files a local spec names, sorted; the files of other kinds it skipped); TinyLMError when none."""
    path = Path(spec).expanduser()
    kinds = ", ".join(SUPPORTED)
    if path.is_file():
        if _kind(path) not in SUPPORTED:
            raise TinyLMError(f"{spec}: unsupported file type {path.suffix or '(none)'!r} "
                              f"(tinylm reads {kinds})")
        return [path], []
    if path.is_dir():
        found = sorted((p for p in path.rglob("*") if p.is_file() and _visible(p, path)),
                       key=lambda p: p.relative_to(path).as_posix())
        files = [p for p in found if _kind(p) in SUPPORTED]
        if not files:
            raise TinyLMError(f"{spec}: the folder holds no {kinds} files")
        return files, [p for p in found if _kind(p) not in SUPPORTED]
    if glob.has_magic(spec):
        matches = [p for p in sorted(Path(p) for p in glob.glob(os.path.expanduser(spec), recursive=True))
                   if p.is_file()]
        files = [p for p in matches if _kind(p) in SUPPORTED]
        if not files:
            raise TinyLMError(f"{spec}: no {kinds} files match this pattern")
        return files, [p for p in matches if _kind(p) not in SUPPORTED]
    raise TinyLMError(f"corpus not found: {spec} (not pystdlib, passkey[:N], hf:NAME, an existing file, folder "
                      "or glob)")


def _open_binary(path: Path) -> BinaryIO:
    try:
        return path.open("rb")
    except OSError as exc:
        raise TinyLMError(f"cannot read {path}: {exc.strerror or exc}") from None


def _jsonl_documents(path: Path, text_field: str, stats: ReadStats) -> Iterator[str]:
    with _open_binary(path) as handle:
        for number, raw in enumerate(handle, 1):
            where = f"{path}:{number}"
            line, replaced = decode_text(raw, where)
            if not line.strip():
                continue
            try:
                row = json.loads(line)
            except json.JSONDecodeError as exc:
                raise TinyLMError(f"{where}: not valid JSON ({exc.msg})") from None
            if not isinstance(row, dict) or text_field not in row:
                fields = ", ".join(map(str, row)) if isinstance(row, dict) else type(row).__name__
                raise TinyLMError(f"{where}: no {text_field!r} field (found: {fields}); "
                                  "choose one with --text-field")
            value = row[text_field]
            if not isinstance(value, str):
                raise TinyLMError(f"{where}: field {text_field!r} holds {type(value).__name__}, not text")
            text, fixed = clean_string(value)
            stats.replaced += replaced or fixed
            yield text


def _parquet_documents(path: Path, text_field: str, stats: ReadStats) -> Iterator[str]:
    try:
        import pyarrow.parquet as pq
    except ImportError:
        raise TinyLMError(f"{path}: reading .parquet needs pyarrow "
                          "(pip install 'tinylm[datasets]')") from None
    try:
        parquet = pq.ParquetFile(path)
    except Exception as exc:  # noqa: BLE001 - pyarrow raises several types for a damaged file
        raise TinyLMError(f"{path}: not a readable Parquet file ({type(exc).__name__})") from None
    names = parquet.schema_arrow.names
    if text_field not in names:
        raise TinyLMError(f"{path}: no {text_field!r} column (found: {', '.join(names)}); "
                          "choose one with --text-field")
    for batch in parquet.iter_batches(batch_size=1024, columns=[text_field]):
        for value in batch.column(0).to_pylist():
            if value is None:
                continue
            if not isinstance(value, str):
                raise TinyLMError(f"{path}: column {text_field!r} holds {type(value).__name__}, not text")
            text, fixed = clean_string(value)
            stats.replaced += fixed
            yield text


def file_documents(path: Path, text_field: str, stats: ReadStats) -> Iterator[str]:
    """The documents of one file, by its kind."""
    kind = _kind(path)
    if kind == ".jsonl":
        yield from _jsonl_documents(path, text_field, stats)
    elif kind == ".parquet":
        yield from _parquet_documents(path, text_field, stats)
    else:
        text, replaced = read_text_file(path)
        stats.replaced += replaced
        yield text


def local_corpus(spec: str, text_field: str = "text") -> Corpus:
    files, skipped = corpus_files(spec)
    stats = [p.stat() for p in files]
    listing = "\n".join(f"{p.absolute()}\t{s.st_size}\t{s.st_mtime_ns}" for p, s in zip(files, stats))
    fingerprint = hashlib.sha256(listing.encode("utf-8", "surrogateescape")).hexdigest()
    plain = all(_kind(p) in TEXT_SUFFIXES for p in files)

    def read(read_stats: ReadStats) -> Iterator[str]:
        for path in files:
            yield from file_documents(path, text_field, read_stats)

    return Corpus(spec=os.path.abspath(os.path.expanduser(spec)), fingerprint=fingerprint, read=read,
                  total_bytes=sum(s.st_size for s in stats) if plain else None, skipped=[str(p) for p in skipped])
