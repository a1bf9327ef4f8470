"""tinylm's tokenizer as GGUF metadata: byte-level BPE with GPT-2's split, written out in full.

llama.cpp's own converter recognises a BPE pre-tokenizer by hashing the ids of a probe string, so a
BPE it has never seen stops it ("BPE pre-tokenizer was not recognized"). tinylm knows its split is
GPT-2's (the ByteLevel regex), so it names it ("gpt-2") and writes the vocabulary itself:

    tokenizer.ggml.model          "gpt2"  (byte-level BPE)
    tokenizer.ggml.pre            "gpt-2" (GPT-2's regex split, tinylm's), or "starcoder" for a BPE that
                                  splits digits one by one first (llama.cpp's name for exactly that split)
    tokenizer.ggml.tokens         every token by id, in the byte alphabet the merges use
    tokenizer.ggml.token_type     1 normal, 3 control for special tokens (end-of-text, roles, <|end|>),
                                  5 unused for the rows a model has beyond its tokenizer
    tokenizer.ggml.merges         "left right", in merge order
    bos / padding token           end-of-text (nothing is added around a prompt: add_bos false)
    eos token                     end-of-text; a chat model's is <|end|>, which ends its replies
    eot (end-of-turn) token       a chat model's <|end|> (a base model has none)
    tokenizer.chat_template       a chat model's template, without transformers' {% generation %} marks

Only a plain GPT-2-style byte-level BPE, with or without the digit split before it, is written (the
conditions tokenizer/tiktoken_bridge.py checks); any other tokenizer is refused with the reason
rather than written as ids llama.cpp would split differently. GPT-2's own r50k (a tiktoken rank
table, which a checkpoint names rather than copies) is written too: tiktoken merges by rank, so each
token's merge is the split of its bytes that BPE over the lower ranks leaves (`merges_from_ranks`),
which is how GPT-2's merges.txt and r50k's ranks describe one tokenizer.
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass
from pathlib import Path

from tinylm.errors import TinyLMError
from tinylm.interop.hf_tokenizer import eot_token, reply_end_token
from tinylm.tokenizer.bytelevel import bytes_to_token
from tinylm.tokenizer.load import load_tokenizer
from tinylm.tokenizer.r50k import MARKER_KEY
from tinylm.tokenizer.tiktoken_bridge import DIGITS_PATTERN, bridge_problem, merge_pair, split_pattern
from tinylm.tokenizer.tokenizer import Tokenizer

NORMAL, CONTROL, UNUSED = 1, 3, 5
_GENERATION_MARK = re.compile(r"\{%-?\s*(?:end)?generation\s*-?%\}")


@dataclass
class GGUFVocab:
    tokens: list[str]
    token_types: list[int]
    merges: list[str]
    eot_id: int
    end_id: int  # what ends a generation: end-of-text, or a chat model's <|end|>
    chat_template: str | None = None
    pre: str = "gpt-2"  # llama.cpp's name for the split before the merges


def portable_chat_template(template: str) -> str:
    """`template` without `{% generation %}` / `{% endgeneration %}`: marks only transformers' Jinja knows.

    They only tell transformers which tokens are the assistant's (for a training mask) and render
    nothing, so the template without them renders the same text in llama.cpp's and Ollama's engines.
    """
    return _GENERATION_MARK.sub("", template)


def merges_from_ranks(ranks: dict[bytes, int]) -> list[tuple[bytes, bytes]]:
    """The merge that makes each multi-byte token, in rank order: BPE on its bytes over lower ranks, two parts left."""
    merges = []
    for token, rank in sorted(ranks.items(), key=lambda item: item[1]):
        if len(token) < 2:
            continue
        parts = [bytes([b]) for b in token]
        while len(parts) > 2:
            pairs = [(ranks.get(parts[i] + parts[i + 1], rank), i) for i in range(len(parts) - 1)]
            best, i = min(pairs)
            if best >= rank:
                raise TinyLMError(f"cannot export to GGUF: tiktoken token {token!r} is not a merge of lower ranks")
            parts[i:i + 2] = [parts[i] + parts[i + 1]]
        merges.append((parts[0], parts[1]))
    return merges


def _tiktoken_rows(tokenizer: Tokenizer) -> tuple[dict[int, str], list[str]]:
    """(id -> token in the byte alphabet, merges) of a tiktoken-backed tokenizer such as r50k."""
    special_ids = set(tokenizer.special_tokens.values())
    ranks = {tokenizer.token_bytes(i): i for i in range(tokenizer.n_vocab) if i not in special_ids}
    merges = [f"{bytes_to_token(left)} {bytes_to_token(right)}" for left, right in merges_from_ranks(ranks)]
    return {i: bytes_to_token(token) for token, i in ranks.items()}, merges


def gguf_vocab(tokenizer_file: Path, vocab_size: int, chat_template: str | None) -> GGUFVocab:
    """The vocabulary padded to the model's `vocab_size` rows; TinyLMError if it is not a plain byte-level BPE."""
    spec = json.loads(tokenizer_file.read_text(encoding="utf-8"))
    if MARKER_KEY in spec:  # r50k: the ranks live in tiktoken's file, found locally as the tokenizer itself does
        tokenizer = load_tokenizer(tokenizer_file)
        tokens, merges = _tiktoken_rows(tokenizer)
        specials, eot_id = dict(tokenizer.special_tokens), tokenizer.eot_id
        pre = "gpt-2"
    else:
        problem = bridge_problem(spec)
        if problem is not None:
            raise TinyLMError(f"cannot export to GGUF: the tokenizer {tokenizer_file} is not a GPT-2-style "
                              f"byte-level BPE ({problem})")
        tokens = {i: token for token, i in spec["model"]["vocab"].items()}
        merges = [" ".join(merge_pair(merge)) for merge in spec["model"].get("merges") or []]
        specials = {added["content"]: added["id"] for added in spec.get("added_tokens") or []}
        eot_id = eot_token(tokenizer_file)[0]
        pre = "starcoder" if split_pattern(spec.get("pre_tokenizer")) == DIGITS_PATTERN else "gpt-2"
    by_id: dict[int, tuple[str, int]] = {i: (token, NORMAL) for i, token in tokens.items()}
    by_id.update({i: (token, CONTROL) for token, i in specials.items()})
    if max(by_id) >= vocab_size:
        raise TinyLMError(f"cannot export to GGUF: the tokenizer has id {max(by_id)}, beyond the model's "
                          f"vocab_size={vocab_size}")
    rows = [by_id.get(i, (f"[PAD{i}]", UNUSED)) for i in range(vocab_size)]
    end = reply_end_token(chat_template)
    end_id = specials.get(end, eot_id) if end is not None else eot_id
    if chat_template is not None:
        chat_template = portable_chat_template(chat_template)
    return GGUFVocab(
        tokens=[token for token, _ in rows], token_types=[kind for _, kind in rows], merges=merges,
        eot_id=eot_id, end_id=end_id, chat_template=chat_template, pre=pre,
    )
