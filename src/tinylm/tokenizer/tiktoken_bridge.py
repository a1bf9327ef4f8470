"""Run a Hugging Face byte-level BPE with tiktoken: same ids, about 5x faster.

Hugging Face `tokenizers` trains a BPE in about a second but encodes slowly; tiktoken encodes the
same BPE several times faster. The two agree when the tokenizer.json is a plain GPT-2-style
byte-level BPE, because then both algorithms compute the same thing:

- tiktoken splits text with the GPT-2 regex, exactly what the ByteLevel pre-tokenizer does
  (`GPT2_PATTERN` is r50k's spelling of that regex); a BPE that first cuts numbers into single
  digits (HF's `Digits(individual_digits=True)` before ByteLevel, StarCoder's and SmolLM's split)
  is the same regex with `DIGITS_PATTERN`'s two changes, one regex where HF runs two splits;
- HF applies merges by their position in the merge list; tiktoken merges the adjacent pair whose
  concatenation has the lowest id. Those orders agree when the i-th merge creates a new token whose
  id grows with i, which is how BPE trainers (GPT-2's and HF's) number their vocabularies.

`tiktoken_from_hf` checks those conditions on the JSON and returns None (with the reason) when any
fails; the caller then keeps encoding with `tokenizers`, correct but slower. A probe text encoded both
ways guards against anything the structural checks miss.
"""

from __future__ import annotations

from typing import Any

from tinylm.tokenizer.bytelevel import CHAR_TO_BYTE, token_to_bytes

GPT2_PATTERN = r"""'(?:[sdmt]|ll|ve|re)| ?\p{L}++| ?\p{N}++| ?[^\s\p{L}\p{N}]++|\s++$|\s+(?!\S)|\s"""
# Digits first, then GPT-2's regex on what lies between them: every number character is a piece of its
# own (no leading space: the digit split already cut the space off), and a whitespace run just before a
# digit ends its piece, as whitespace at the end of the text does (hence `(?![^\s\p{N}])` for `(?!\S)`).
DIGITS_PATTERN = r"""'(?:[sdmt]|ll|ve|re)| ?\p{L}++|\p{N}| ?[^\s\p{L}\p{N}]++|\s++$|\s+(?![^\s\p{N}])|\s"""

PROBE_TEXT = (
    "def f(x, y):\n\treturn x**2 + y  # it's fine, isn't it?\n\n\n    \n"
    "Hello   world!  Ünïcödé café naïve 東京 Москва مرحبا 🙂👍🏽 e\u0301 \u200b\x00\x07\r\n"
    "1234567890 3.14159 0xFF {'a': [1, 2]} <html><b>bold</b></html>\n"
    "I'm we'll they've she'd it's   'quoted' \"double\" ``back``   \t\t trailing   "
)


def merge_pair(merge: Any) -> tuple[str, str]:
    """tokenizer.json merges are "a b" strings (older files) or [a, b] pairs (tokenizers >= 0.20)."""
    if isinstance(merge, str):
        left, right = merge.split(" ", 1)
        return left, right
    left, right = merge
    return left, right


def _is_gpt2_bytelevel(pre: Any) -> bool:
    return (isinstance(pre, dict) and pre.get("type") == "ByteLevel" and pre.get("use_regex", True) is True
            and pre.get("add_prefix_space", False) is False)


def split_pattern(pre: Any) -> str | None:
    """tiktoken's regex for a tokenizer.json `pre_tokenizer`: GPT-2's split, or single digits then GPT-2's;
    None for any other split."""
    if _is_gpt2_bytelevel(pre):
        return GPT2_PATTERN
    steps = pre.get("pretokenizers") if isinstance(pre, dict) and pre.get("type") == "Sequence" else None
    if (isinstance(steps, list) and len(steps) == 2 and isinstance(steps[0], dict)
            and steps[0].get("type") == "Digits" and steps[0].get("individual_digits") is True
            and _is_gpt2_bytelevel(steps[1])):
        return DIGITS_PATTERN
    return None


def mergeable_vocab(spec: dict[str, Any]) -> dict[str, int]:
    """The BPE vocabulary without the added (special) tokens, which tiktoken keeps apart."""
    added = {token["content"] for token in spec.get("added_tokens") or []}
    return {token: token_id for token, token_id in (spec.get("model") or {}).get("vocab", {}).items()
            if token not in added}


def bridge_problem(spec: dict[str, Any]) -> str | None:
    """Why this tokenizer.json cannot run on tiktoken, or None when it can."""
    model = spec.get("model") or {}
    if model.get("type") != "BPE":
        return f"model type is {model.get('type')!r}, not BPE"
    if model.get("dropout") not in (None, 0, 0.0):
        return "BPE dropout is on"
    if model.get("continuing_subword_prefix") or model.get("end_of_word_suffix"):
        return "subword prefixes/suffixes are set"
    if model.get("byte_fallback"):
        return "byte_fallback is on"
    if spec.get("normalizer") is not None:
        return "a normalizer is set"
    if split_pattern(spec.get("pre_tokenizer")) is None:
        return "the pre-tokenizer is not GPT-2's ByteLevel regex split (alone or after single digits)"
    for added in spec.get("added_tokens") or []:
        if not added.get("special") or added.get("lstrip") or added.get("rstrip") or added.get("single_word"):
            return f"added token {added.get('content')!r} is not a plain special token"
    vocab = mergeable_vocab(spec)
    if any(char not in CHAR_TO_BYTE for token in vocab for char in token):
        return "the vocabulary is not byte-level"
    singles = {token for token in vocab if len(token) == 1}
    if len(singles) != 256:
        return f"the vocabulary has {len(singles)} of the 256 single bytes"
    previous = -1
    produced: set[str] = set()
    for merge in model.get("merges") or []:
        left, right = merge_pair(merge)
        token = left + right
        if left not in vocab or right not in vocab or token not in vocab:
            return f"merge {left!r} + {right!r} refers to a token outside the vocabulary"
        if vocab[token] <= previous or token in produced:
            return "merge order and token ids disagree"
        previous = vocab[token]
        produced.add(token)
    if produced != set(vocab) - singles:
        return "some multi-byte tokens are not produced by any merge"
    return None


def tiktoken_from_hf(spec: dict[str, Any], name: str):
    """A `tiktoken.Encoding` equivalent to the byte-level BPE in `spec` (a parsed tokenizer.json)."""
    import tiktoken

    ranks = {token_to_bytes(token): token_id for token, token_id in mergeable_vocab(spec).items()}
    specials = {added["content"]: int(added["id"]) for added in spec.get("added_tokens") or []}
    return tiktoken.Encoding(name, pat_str=split_pattern(spec.get("pre_tokenizer")), mergeable_ranks=ranks,
                             special_tokens=specials)
