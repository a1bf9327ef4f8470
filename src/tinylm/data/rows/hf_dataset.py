"""A Hugging Face dataset split, opened one way for every reader (`datasets`, an optional extra, imported only here).

NAME (see `hf_spec.py`) is tried as a folder written by `save_to_disk`, then as one local file (its kind
picks the packaged builder: json, parquet, csv, text, arrow; the file becomes split SPLIT), then as a
local folder of data files or a Hub dataset. A corpus is streamed (`streaming=True`), so a 10 GB corpus
never has to fit on disk twice, and quietly, since prepare draws its own progress; training and task
rows are loaded whole, as `datasets` loads them. Any failure, offline, a missing dataset or split, no
`datasets` at all, is one line naming the spec, never a traceback.
"""

from __future__ import annotations

import os
from collections.abc import Iterable, Iterator
from pathlib import Path
from typing import Any

from tinylm.data.rows.hf_spec import HF_PREFIX, HfSpec, parse_hf_spec
from tinylm.errors import TinyLMError

FILE_BUILDERS = {".json": "json", ".jsonl": "json", ".parquet": "parquet", ".csv": "csv", ".txt": "text",
                 ".arrow": "arrow"}


def _offline() -> bool:
    return any(os.environ.get(v, "").lower() in ("1", "true", "yes", "on")
               for v in ("HF_DATASETS_OFFLINE", "HF_HUB_OFFLINE"))


def _one_line(exc: BaseException) -> str:
    lines = str(exc).strip().splitlines()
    return f"{type(exc).__name__}: {lines[0]}" if lines else type(exc).__name__


def hf_failure(spec: str, hf: HfSpec, exc: BaseException) -> TinyLMError:
    """The one line for a dataset that cannot be read: which dataset, config and split, and why."""
    config = f" config {hf.config!r}" if hf.config else ""
    hint = " (offline: HF_DATASETS_OFFLINE/HF_HUB_OFFLINE is set)" if _offline() else ""
    return TinyLMError(f"{spec}: cannot read Hugging Face dataset {hf.name!r}{config} split {hf.split!r}{hint}: "
                       f"{_one_line(exc)}")


def _load(datasets: Any, hf: HfSpec, streaming: bool) -> Iterable[dict[str, Any]]:
    folder = Path(hf.name).expanduser()
    if (folder / "state.json").is_file() or (folder / "dataset_dict.json").is_file():
        loaded = datasets.load_from_disk(str(folder))
        if isinstance(loaded, datasets.DatasetDict):
            if hf.split not in loaded:
                raise ValueError(f"Bad split: {hf.split}. Available splits: {sorted(loaded)}")
            return loaded[hf.split]
        return loaded
    if folder.is_file():  # one local file, read by the packaged builder for its kind
        builder = FILE_BUILDERS.get(folder.suffix.lower())
        if builder is None:
            kinds = ", ".join(sorted(FILE_BUILDERS))
            raise TinyLMError(f"{HF_PREFIX}{hf.name}: datasets has no builder for {folder.suffix or 'extensionless'} "
                              f"files (it reads {kinds})")
        return datasets.load_dataset(builder, data_files={hf.split: str(folder)}, split=hf.split, streaming=streaming)
    path = str(folder) if folder.is_dir() else hf.name
    return datasets.load_dataset(path, hf.config, split=hf.split, streaming=streaming)


def open_hf(spec: str, default_split: str, *, streaming: bool) -> tuple[HfSpec, Iterable[dict[str, Any]]]:
    """(the parsed spec, its split as an iterable of row dicts); TinyLMError (one line) when it cannot be opened."""
    hf = parse_hf_spec(spec, default_split)
    try:
        import datasets  # optional and heavy: pip install 'tinylm[datasets]'
    except ImportError:
        raise TinyLMError(f"{spec}: reading a Hugging Face dataset needs the datasets library: "
                          "pip install 'tinylm[datasets]'") from None
    if streaming:
        datasets.disable_progress_bars()
        datasets.logging.set_verbosity_error()
    try:
        return hf, _load(datasets, hf, streaming)
    except TinyLMError:
        raise
    except Exception as exc:  # noqa: BLE001 - datasets raises many types (network, missing, bad split)
        raise hf_failure(spec, hf, exc) from None


def hf_rows(spec: str, default_split: str) -> Iterator[tuple[str, dict[str, Any]]]:
    """(NAME[split]:INDEX, row) of every row, loaded when first asked; None cells dropped, since `datasets` gives a
    row None for each column only other rows have."""
    hf, rows = open_hf(spec, default_split, streaming=False)
    for index, row in enumerate(rows):
        yield f"{hf.name}[{hf.split}]:{index}", {key: value for key, value in row.items() if value is not None}
