"""Where prepared data lives when the user names no folder, so `tinylm train` finds it again.

A prepared dataset goes to `<tinylm home>/data/<corpus>-<tokenizer>` (the home is `paths.tinylm_home`),
e.g. `data/pystdlib-bpe4096`. An `hf:` corpus is named after its parsed parts (`rows/hf_spec.py`), so
`hf:NAME` and `hf:NAME::train` share a folder. Names that come from paths (a local corpus, a tokenizer
file) get a short hash of the absolute path, so two folders both called `data` never share an output
folder.
"""

from __future__ import annotations

import hashlib
import re
from pathlib import Path

from tinylm.data.rows.hf_spec import is_hf_spec, parse_hf_spec
from tinylm.paths import tinylm_home


def _clean(text: str) -> str:
    """Only characters every file system accepts in a folder name."""
    return re.sub(r"[^A-Za-z0-9._]+", "-", text).strip("-.") or "x"


def _path_slug(path: str) -> str:
    absolute = str(Path(path).expanduser().absolute())
    digest = hashlib.sha256(absolute.encode("utf-8")).hexdigest()[:8]
    return f"{_clean(Path(absolute).stem or 'root')}-{digest}"


def corpus_slug(corpus: str) -> str:
    """Folder-name part for a corpus: `pystdlib`, `hf-NAME-CONFIG-SPLIT`, or `<name>-<hash>` for a path."""
    if corpus == "pystdlib":
        return corpus
    if is_hf_spec(corpus):
        name, config, split = parse_hf_spec(corpus)
        return "hf-" + _clean(f"{name}-{config or 'default'}-{split}")
    return _path_slug(corpus)


def tokenizer_slug(tokenizer: str, vocab_size: int) -> str:
    """Folder-name part for a tokenizer spec: `bpe4096`, `bpe4096-digits`, `r50k`, or `<name>-<hash>` for a file."""
    if tokenizer == "bpe":
        return f"bpe{vocab_size}"
    if tokenizer == "bpe-digits":
        return f"bpe{vocab_size}-digits"
    if tokenizer == "r50k":
        return tokenizer
    return _path_slug(tokenizer)


def default_data_dir(corpus: str = "pystdlib", tokenizer: str = "bpe", vocab_size: int = 4096) -> Path:
    """The folder `tinylm prepare` writes to, and `tinylm train` reads from, when given none."""
    return tinylm_home() / "data" / f"{corpus_slug(corpus)}-{tokenizer_slug(tokenizer, vocab_size)}"
