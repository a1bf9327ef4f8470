"""tinylm's per-user folder, where prepared data and caches live when the user names no folder.

The root is `$TINYLM_HOME` if set (tests point it at a temporary folder), else the XDG data folder
(`$XDG_DATA_HOME/tinylm`, by default `~/.local/share/tinylm`). What goes below it is its owner's to
name: prepared datasets (`data/folders.py`), the r50k tokenizer, the measurement cache.

This module is a leaf (the standard library only), since data, tokenizer and runtime all find their
folders here.
"""

from __future__ import annotations

import os
from pathlib import Path


def tinylm_home() -> Path:
    """tinylm's per-user folder for prepared data and caches."""
    if os.environ.get("TINYLM_HOME"):
        return Path(os.environ["TINYLM_HOME"]).expanduser()
    xdg = os.environ.get("XDG_DATA_HOME")
    base = Path(xdg).expanduser() if xdg else Path.home() / ".local" / "share"
    return base / "tinylm"
