"""The one grammar of a Hugging Face dataset spec: `hf:NAME[:CONFIG][:SPLIT]`.

NAME is a Hub dataset (`roneneldan/TinyStories`), a local folder or file that `datasets` reads, or a
folder written by `save_to_disk`; CONFIG may be empty (`hf:NAME::validation`); SPLIT defaults to the
reader's own (`train` for corpora and training data, `test` for a task's held-out rows). Corpora,
training data, tasks and evaluation files all spell it this way, and the folder a prepared corpus gets
is named after the parsed parts (`data/folders.py`), so `hf:NAME` and `hf:NAME::train` share it. A
`?config=...&split=...` query is refused with the spelling to use instead.
"""

from __future__ import annotations

from typing import NamedTuple

from tinylm.errors import TinyLMError

HF_PREFIX = "hf:"
GRAMMAR = "hf:NAME[:CONFIG][:SPLIT]"


class HfSpec(NamedTuple):
    name: str
    config: str | None
    split: str

    @property
    def canonical(self) -> str:
        """The spec with every part spelled out: `hf:NAME:CONFIG:SPLIT` (CONFIG empty when none)."""
        return f"{HF_PREFIX}{self.name}:{self.config or ''}:{self.split}"


def is_hf_spec(spec: str) -> bool:
    """Whether `spec` names a Hugging Face dataset (it may still be a malformed one: `parse_hf_spec` says why)."""
    return spec.startswith(HF_PREFIX)


def parse_hf_spec(spec: str, default_split: str = "train") -> HfSpec:
    """`hf:NAME[:CONFIG][:SPLIT]` -> (name, config or None, split); `default_split` when it names none."""
    if "?" in spec:
        raise TinyLMError(f"bad dataset spec {spec!r}: expected {GRAMMAR} (config and split go after colons, "
                          "e.g. hf:openai/gsm8k:main:test)")
    parts = spec.removeprefix(HF_PREFIX).split(":")
    if not is_hf_spec(spec) or len(parts) > 3 or not parts[0].strip():
        raise TinyLMError(f"bad dataset spec {spec!r}: expected {GRAMMAR}")
    name = parts[0].strip()
    config = parts[1].strip() if len(parts) > 1 and parts[1].strip() else None
    split = parts[2].strip() if len(parts) > 2 and parts[2].strip() else default_split
    return HfSpec(name, config, split)
