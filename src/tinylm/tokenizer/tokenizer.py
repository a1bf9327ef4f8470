"""The one tokenizer object every stage uses: text <-> ids, raw bytes per token, EOT, model vocab size.

Two engines sit behind it. Encoding goes through tiktoken whenever the tokenizer allows it (always
for tinylm's own BPE and for r50k), because tiktoken is several times faster than Hugging Face
`tokenizers` at producing the very same ids; `tokenizers` remains the trainer and the file format
(tokenizer.json) and encodes whatever tiktoken cannot run. Decoding never goes through either
engine's text decoder: ids become raw bytes (`token_bytes`), joined and then decoded as UTF-8, so a
character split across two tokens decodes correctly and streaming generation can do the same.

Rules a caller can rely on:
- `encode` treats special-token text such as "<|endoftext|>" or "<|user|>" in its input as that
  special token, exactly as Hugging Face tokenizers (and so `transformers`) do; `encode_ordinary`
  treats it as plain text, which is what corpus encoding uses so only prepare decides where documents
  end, and what the chat renderer uses for message contents. `special_tokens` maps each special
  token's text to its id.
- Strings that are not valid Unicode (lone surrogates, which UTF-8 cannot store) encode as if each
  lone surrogate were U+FFFD.
- `decode(encode(s)) == s` for every valid string with a byte-level tokenizer.
- Ids at or above `n_vocab` (the padding rows of a model whose `vocab_size` is rounded up) carry no
  text: `token_bytes` gives b"" and `decode` skips them. Negative ids are an error.
"""

from __future__ import annotations

import hashlib
import os
from collections.abc import Sequence
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import numpy as np


def available_threads() -> int:
    """CPU cores this process may use (respects taskset/cgroup affinity where the OS reports it)."""
    try:
        return max(1, len(os.sched_getaffinity(0)))
    except AttributeError:  # macOS, Windows
        return max(1, os.cpu_count() or 1)


def valid_unicode(text: str) -> str:
    """`text` with lone surrogates replaced by U+FFFD, so it can be stored as UTF-8."""
    try:
        text.encode("utf-8")
        return text
    except UnicodeEncodeError:
        return text.encode("utf-16", "surrogatepass").decode("utf-16", "replace")


class Tokenizer:
    """A byte-level tokenizer with a fast tiktoken path; build it with `load_tokenizer` or `train_bpe`."""

    def __init__(self, *, name: str, saved: str, eot_id: int, n_vocab: int, vocab_size: int | None = None,
                 encoding: Any = None, hf: Any = None, byte_table: list[bytes] | None = None,
                 fallback_reason: str | None = None, special_tokens: dict[str, int] | None = None) -> None:
        if encoding is None and hf is None:
            raise ValueError("a Tokenizer needs a tiktoken encoding or a tokenizers object")
        self.name = name
        self.eot_id = eot_id
        self.special_tokens: dict[str, int] = dict(special_tokens) if special_tokens else {}
        self.n_vocab = n_vocab
        self.vocab_size = n_vocab if vocab_size is None else vocab_size
        self.fallback_reason = fallback_reason
        self.num_threads = available_threads()
        self._saved = saved
        self._encoding = encoding
        self._hf = hf
        self._hf_ordinary: Any = None
        self._byte_table = byte_table

    # ---- identity --------------------------------------------------------------------------------
    @property
    def backend(self) -> str:
        """"tiktoken" (fast path) or "tokenizers" (the exact but slower fallback)."""
        return "tiktoken" if self._encoding is not None else "tokenizers"

    @property
    def fingerprint(self) -> str:
        """sha256 of the saved form: equal fingerprints mean the same ids for every text."""
        return hashlib.sha256(self._saved.encode("utf-8")).hexdigest()

    def to_json(self) -> str:
        """The text `save` writes (a tokenizer.json, or tinylm's small r50k marker)."""
        return self._saved

    def save(self, path: str | Path) -> Path:
        """Write tokenizer.json (into `path` if it is a folder) under a temporary name, then rename it."""
        target = Path(path)
        if target.is_dir():
            target = target / "tokenizer.json"
        target.parent.mkdir(parents=True, exist_ok=True)
        tmp = target.with_name(f".{target.name}.tmp-{os.getpid()}")
        tmp.write_text(self._saved, encoding="utf-8")
        os.replace(tmp, target)
        return target

    def __repr__(self) -> str:
        return (f"Tokenizer(name={self.name!r}, n_vocab={self.n_vocab}, vocab_size={self.vocab_size}, "
                f"eot_id={self.eot_id}, backend={self.backend!r})")

    def token_to_id(self, text: str) -> int | None:
        """The id of the one token spelled `text` (a special token, or a single ordinary token), else None."""
        if text in self.special_tokens:
            return self.special_tokens[text]
        ids = self.encode_ordinary(text) if text else []
        return ids[0] if len(ids) == 1 and self.token_bytes(ids[0]) == text.encode("utf-8") else None

    # ---- encoding --------------------------------------------------------------------------------
    def _ordinary_hf(self) -> Any:
        """A second tokenizers object with special-token matching off (the flag is per object)."""
        if self._hf_ordinary is None:
            from tokenizers import Tokenizer as HFTokenizer

            self._hf_ordinary = HFTokenizer.from_str(self._saved)
            self._hf_ordinary.encode_special_tokens = True
        return self._hf_ordinary

    def _hf_batch(self, hf: Any, texts: list[str]) -> list[list[int]]:
        try:
            encodings = hf.encode_batch(texts, add_special_tokens=False)
        except TypeError:  # a lone surrogate somewhere: apply the U+FFFD rule and retry
            encodings = hf.encode_batch([valid_unicode(t) for t in texts], add_special_tokens=False)
        return [e.ids for e in encodings]

    def encode(self, text: str) -> list[int]:
        """Ids of `text`; special-token text in it becomes the special token (as in `transformers`)."""
        if self._encoding is not None:
            return self._encoding.encode(text, allowed_special="all")
        return self._hf_batch(self._hf, [text])[0]

    def encode_ordinary(self, text: str) -> list[int]:
        """Ids of `text` with special-token text encoded as ordinary text."""
        if self._encoding is not None:
            return self._encoding.encode_ordinary(text)
        return self._hf_batch(self._ordinary_hf(), [text])[0]

    def encode_batch(self, texts: list[str]) -> list[list[int]]:
        """`encode` over many texts, on all cores."""
        if self._encoding is not None:
            return self._encoding.encode_batch(list(texts), num_threads=self.num_threads,
                                               allowed_special="all")
        return self._hf_batch(self._hf, list(texts))

    def encode_ordinary_batch(self, texts: list[str]) -> list[list[int]]:
        """`encode_ordinary` over many texts, on all cores."""
        if self._encoding is not None:
            return self._encoding.encode_ordinary_batch(list(texts), num_threads=self.num_threads)
        return self._hf_batch(self._ordinary_hf(), list(texts))

    def encode_arrays(self, texts: list[str]) -> list[np.ndarray]:
        """`encode_ordinary_batch` as uint32 arrays, skipping Python lists on the fast path (for shards)."""
        if self._encoding is None:
            return [np.asarray(ids, dtype=np.uint32) for ids in self.encode_ordinary_batch(texts)]
        encoding = self._encoding

        def one(text: str) -> np.ndarray:
            try:
                return encoding.encode_to_numpy(text, allowed_special=set(), disallowed_special=())
            except UnicodeEncodeError:  # lone surrogates: the U+FFFD rule
                fixed = valid_unicode(text)
                return encoding.encode_to_numpy(fixed, allowed_special=set(), disallowed_special=())

        if self.num_threads == 1 or len(texts) < 2:
            return [one(t) for t in texts]
        with ThreadPoolExecutor(self.num_threads) as pool:  # tiktoken releases the GIL while encoding
            return list(pool.map(one, texts))

    # ---- decoding --------------------------------------------------------------------------------
    def token_bytes(self, token_id: int) -> bytes:
        """The raw bytes of one token (b"" for padding ids), for decoding UTF-8 across token boundaries."""
        token_id = int(token_id)
        if token_id < 0:
            raise ValueError(f"token id {token_id} is negative")
        if token_id >= self.n_vocab:
            return b""
        if self._encoding is not None:
            try:
                return self._encoding.decode_single_token_bytes(token_id)
            except KeyError:  # a hole in the id range
                return b""
        table = self._bytes_table()
        return table[token_id] if token_id < len(table) else b""

    def _bytes_table(self) -> list[bytes]:
        """id -> bytes for the tokenizers backend, built on first use."""
        if self._byte_table is None:
            hf = self._hf
            self._byte_table = [hf.decode([i], skip_special_tokens=False).encode("utf-8")
                                for i in range(self.n_vocab)]
        return self._byte_table

    def decode_bytes(self, ids: Sequence[int]) -> bytes:
        """The raw bytes of a sequence of ids."""
        ids = [int(i) for i in ids]
        if self._encoding is not None:
            try:
                return self._encoding.decode_bytes(ids)
            except (KeyError, OverflowError, ValueError):
                pass  # padding ids or a negative id: go one token at a time for the exact rule
        return b"".join(self.token_bytes(i) for i in ids)

    def decode(self, ids: Sequence[int]) -> str:
        """Text of `ids`; bytes that are not valid UTF-8 (a cut-off character) become U+FFFD."""
        return self.decode_bytes(ids).decode("utf-8", errors="replace")
