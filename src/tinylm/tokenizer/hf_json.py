"""A Hugging Face tokenizer.json as a tinylm `Tokenizer`, on tiktoken when the file allows it.

The file stays the source of truth: it is what `tokenizers` trained, what gets saved next to the
shards and checkpoints, and what `transformers` loads after export. tiktoken is only a faster engine
for the same ids, used when `bridge_problem` finds nothing against it and a probe text encodes
identically both ways; otherwise `tokenizers` encodes (same ids, slower) and the reason is kept in
`Tokenizer.fallback_reason`. Tokenizers that are not byte-level (WordPiece, SentencePiece-style) load
too, but their `token_bytes` is each token decoded on its own, which loses the spaces such formats
insert between tokens: tinylm's lossless guarantees hold for byte-level BPEs only.
"""

from __future__ import annotations

import json
from typing import Any

from tinylm.errors import TinyLMError
from tinylm.tokenizer.bytelevel import CHAR_TO_BYTE, token_to_bytes
from tinylm.tokenizer.tiktoken_bridge import PROBE_TEXT, bridge_problem, tiktoken_from_hf
from tinylm.tokenizer.tokenizer import Tokenizer

EOT = "<|endoftext|>"
EOT_NAMES = (EOT, "<|end_of_text|>", "<|eot|>", "</s>", "<eos>", "<|im_end|>")


def special_tokens(spec: dict[str, Any]) -> dict[str, int]:
    """{text: id} of the added tokens marked special (the ones `transformers` never splits or merges)."""
    return {t["content"]: int(t["id"]) for t in spec.get("added_tokens") or [] if t.get("special")}


def _end_of_text_id(spec: dict[str, Any], where: str) -> int:
    specials = special_tokens(spec)
    for name in EOT_NAMES:
        if name in specials:
            return specials[name]
    raise TinyLMError(f"{where} has no end-of-text special token (one of {', '.join(EOT_NAMES)})")


def _is_byte_level(spec: dict[str, Any]) -> bool:
    """True when every non-special token spells raw bytes in GPT-2's alphabet and decoding undoes it."""
    decoder = spec.get("decoder") or {}
    decoders = decoder.get("decoders", []) if decoder.get("type") == "Sequence" else [decoder]
    if not any(d.get("type") == "ByteLevel" for d in decoders):
        return False
    added = {t["content"] for t in spec.get("added_tokens") or []}
    vocab = (spec.get("model") or {}).get("vocab")
    if not isinstance(vocab, dict):
        return False
    return all(char in CHAR_TO_BYTE for token in vocab if token not in added for char in token)


def _byte_table(spec: dict[str, Any], n_vocab: int) -> list[bytes]:
    table = [b""] * n_vocab
    added = {t["content"]: int(t["id"]) for t in spec.get("added_tokens") or []}
    for token, token_id in spec["model"]["vocab"].items():
        if token not in added:
            table[token_id] = token_to_bytes(token)
    for content, token_id in added.items():
        table[token_id] = content.encode("utf-8")
    return table


def _probe_agrees(encoding: Any, hf: Any, specials: list[str]) -> bool:
    """Same ids from both engines on a varied text, with and without special-token text inside it."""
    mixed = PROBE_TEXT + "".join(f"{s} x{s}" for s in specials)
    special = encoding.encode(mixed, allowed_special="all")
    ordinary = encoding.encode_ordinary(PROBE_TEXT)
    return (hf.encode(mixed, add_special_tokens=False).ids == special
            and hf.encode(PROBE_TEXT, add_special_tokens=False).ids == ordinary)


def tokenizer_from_hf_json(text: str, where: str = "tokenizer.json") -> Tokenizer:
    """Build a `Tokenizer` from the text of a tokenizer.json; `where` names it in error messages."""
    from tokenizers import Tokenizer as HFTokenizer

    try:
        spec = json.loads(text)
        hf = HFTokenizer.from_str(text)
    except Exception as exc:  # noqa: BLE001 - any parse failure means the file is not a tokenizer
        raise TinyLMError(f"{where} is not a Hugging Face tokenizer.json ({type(exc).__name__})") from None
    eot_id = _end_of_text_id(spec, where)
    ids = [int(i) for i in (spec.get("model") or {}).get("vocab", {}).values()]
    ids += [int(t["id"]) for t in spec.get("added_tokens") or []]
    n_vocab = max(ids) + 1
    byte_level = _is_byte_level(spec)
    kind = str((spec.get("model") or {}).get("type", "tokenizer")).lower()
    name = f"{kind}{n_vocab}"

    problem = bridge_problem(spec) if byte_level else "the vocabulary is not byte-level"
    encoding = None
    if problem is None:
        encoding = tiktoken_from_hf(spec, name)
        specials = [t["content"] for t in spec.get("added_tokens") or []]
        if not _probe_agrees(encoding, hf, specials):
            encoding, problem = None, "tiktoken and tokenizers disagree on a probe text"
    return Tokenizer(name=name, saved=text, eot_id=eot_id, n_vocab=n_vocab, encoding=encoding,
                     hf=None if encoding is not None else hf,
                     byte_table=_byte_table(spec, n_vocab) if byte_level else None, fallback_reason=problem,
                     special_tokens=special_tokens(spec))
