"""Which corpus a `--corpus` spec names: the embedded stdlib, local files, or a Hugging Face dataset.

Several joined by `+` (`pystdlib+passkey`) are one corpus, their documents in turn (mixture.py).
Each source builds a `Corpus` (corpus.py) from its spec; this is the one place that maps specs to sources.
"""

from __future__ import annotations

from pathlib import Path

from tinylm.data.corpus import Corpus
from tinylm.data.files import local_corpus
from tinylm.data.hf import hf_corpus
from tinylm.data.mixture import mixed_corpus
from tinylm.data.passkey_corpus import passkey_corpus
from tinylm.data.pystdlib import pystdlib_corpus
from tinylm.data.rows.hf_spec import is_hf_spec
from tinylm.errors import TinyLMError


def open_corpus(spec: str, text_field: str = "text") -> Corpus:
    """The corpus `spec` names; TinyLMError (one line) when it cannot exist."""
    if not isinstance(spec, str) or not spec.strip():
        raise TinyLMError("--corpus is empty: give pystdlib, a path, a glob or hf:NAME")
    if "+" in spec and not Path(spec).expanduser().exists():
        return mixed_corpus([open_corpus(part, text_field) for part in spec.split("+")])
    if spec == "pystdlib":
        return pystdlib_corpus()
    if spec == "passkey" or spec.startswith("passkey:"):
        return passkey_corpus(spec)
    if is_hf_spec(spec):
        return hf_corpus(spec, text_field)
    return local_corpus(spec, text_field)
