"""Where prepared data lives when the user names no folder, so `tinylm train` finds it again.

The root is `$TINYLM_HOME` if set (tests point it at a temporary folder), else the XDG data folder
(`$XDG_DATA_HOME/tinylm`, by default `~/.local/share/tinylm`). A prepared dataset goes to
`data/<corpus>-<tokenizer>`, e.g. `data/pystdlib-bpe4096`. Names that come from paths (a local
corpus, a tokenizer file) get a short hash of the absolute path, so two folders both called `data`
never share an output folder.

This module is a leaf (the standard library and tinylm.errors only), since data, tokenizer and
runtime all find their folders here; so it holds the grammar of an `hf:` corpus name itself.
"""

from __future__ import annotations

import hashlib
import os
import re
from pathlib import Path

from tinylm.errors import TinyLMError


def tinylm_home() -> Path:
    """tinylm's per-user folder for prepared data and caches."""
    if os.environ.get("TINYLM_HOME"):
        return Path(os.environ["TINYLM_HOME"]).expanduser()
    xdg = os.environ.get("XDG_DATA_HOME")
    base = Path(xdg).expanduser() if xdg else Path.home() / ".local" / "share"
    return base / "tinylm"


def _clean(text: str) -> str:
    """Only characters every file system accepts in a folder name."""
    return re.sub(r"[^A-Za-z0-9._]+", "-", text).strip("-.") or "x"


def _path_slug(path: str) -> str:
    absolute = str(Path(path).expanduser().absolute())
    digest = hashlib.sha256(absolute.encode("utf-8")).hexdigest()[:8]
    return f"{_clean(Path(absolute).stem or 'root')}-{digest}"


def parse_hf_spec(spec: str) -> tuple[str, str | None, str]:
    """`hf:NAME[:CONFIG][:SPLIT]` -> (name, config or None, split)."""
    parts = spec[len("hf:"):].split(":")
    if len(parts) > 3 or not parts[0].strip():
        raise TinyLMError(f"bad corpus {spec!r}: expected hf:NAME[:CONFIG][:SPLIT]")
    name = parts[0].strip()
    config = parts[1].strip() if len(parts) > 1 and parts[1].strip() else None
    split = parts[2].strip() if len(parts) > 2 and parts[2].strip() else "train"
    return name, config, split


def corpus_slug(corpus: str) -> str:
    """Folder-name part for a corpus: `pystdlib`, `hf-NAME-CONFIG-SPLIT`, or `<name>-<hash>` for a path."""
    if corpus == "pystdlib":
        return corpus
    if corpus.startswith("hf:"):
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
