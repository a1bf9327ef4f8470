"""`load_tokenizer`: a saved tokenizer file (or a folder holding tokenizer.json) back into a `Tokenizer`.

Two kinds of file share the name tokenizer.json: a Hugging Face tokenizers file (tinylm's trained
BPE or any byte-level tokenizer from the Hub) and tinylm's small marker for a tiktoken encoding
(r50k, with any special tokens added after its EOT), which cannot be written as a Hugging Face file.
"""

from __future__ import annotations

import json
from pathlib import Path

from tinylm.errors import TinyLMError
from tinylm.tokenizer.hf_json import tokenizer_from_hf_json
from tinylm.tokenizer.r50k import ADDED_KEY, MARKER_KEY, R50K_NAME, load_r50k
from tinylm.tokenizer.tokenizer import Tokenizer


def tokenizer_file(path: str | Path) -> Path:
    """`path` itself, or `path/tokenizer.json` for a folder; TinyLMError if there is no such file."""
    file = Path(path)
    if file.is_dir():
        file = file / "tokenizer.json"
    if not file.is_file():
        raise TinyLMError(f"tokenizer file not found: {file}")
    return file


def load_tokenizer(path: str | Path) -> Tokenizer:
    """The tokenizer saved at `path` (a tokenizer.json file, or a folder that holds one)."""

    file = tokenizer_file(path)
    try:
        text = file.read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as exc:
        raise TinyLMError(f"cannot read tokenizer file {file}: {exc}") from None
    try:
        head = json.loads(text)
    except json.JSONDecodeError:
        raise TinyLMError(f"{file} is not a tokenizer file (not JSON)") from None
    if isinstance(head, dict) and MARKER_KEY in head:
        if head[MARKER_KEY] != R50K_NAME:
            raise TinyLMError(f"{file} names the tiktoken encoding {head[MARKER_KEY]!r}; "
                              f"tinylm knows {R50K_NAME}")
        return load_r50k(added=head.get(ADDED_KEY))
    return tokenizer_from_hf_json(text, where=str(file))
