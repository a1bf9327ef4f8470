"""tinylm's tokenizer as GGUF metadata: byte-level BPE with GPT-2's split, written out in full.

llama.cpp's own converter recognises a BPE pre-tokenizer by hashing the ids of a probe string, so a
BPE it has never seen stops it ("BPE pre-tokenizer was not recognized"). tinylm knows its split is
GPT-2's (the ByteLevel regex), so it names it ("gpt-2") and writes the vocabulary itself:

    tokenizer.ggml.model          "gpt2"  (byte-level BPE)
    tokenizer.ggml.pre            "gpt-2" (GPT-2's regex split, tinylm's)
    tokenizer.ggml.tokens         every token by id, in the byte alphabet the merges use
    tokenizer.ggml.token_type     1 normal, 3 control for special tokens (end-of-text, roles, <|end|>),
                                  5 unused for the rows a model has beyond its tokenizer
    tokenizer.ggml.merges         "left right", in merge order
    bos / padding token           end-of-text (nothing is added around a prompt: add_bos false)
    eos / end-of-turn token       end-of-text; a chat model's is <|end|>, which ends its replies
    tokenizer.chat_template       a chat model's template, without transformers' {% generation %} marks

Only a plain GPT-2-style byte-level BPE is written (the conditions tokenizer/tiktoken_bridge.py
checks); any other tokenizer is refused with the reason rather than written as ids llama.cpp
would split differently.
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass, field
from pathlib import Path

from tinylm.errors import TinyLMError
from tinylm.interop.hf_tokenizer import eot_token
from tinylm.tokenizer.chat_tokens import END_OF_TURN
from tinylm.tokenizer.tiktoken_bridge import bridge_problem, merge_pair

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
    specials: dict[str, int] = field(default_factory=dict)


def portable_chat_template(template: str) -> str:
    """`template` without `{% generation %}` / `{% endgeneration %}`: marks only transformers' Jinja knows.

    They only tell transformers which tokens are the assistant's (for a training mask) and render
    nothing, so the template without them renders the same text in llama.cpp's and Ollama's engines.
    """
    return _GENERATION_MARK.sub("", template)


def gguf_vocab(tokenizer_file: Path, vocab_size: int, chat_template: str | None) -> GGUFVocab:
    """The vocabulary padded to the model's `vocab_size` rows; TinyLMError if it is not a plain byte-level BPE."""
    spec = json.loads(tokenizer_file.read_text(encoding="utf-8"))
    problem = bridge_problem(spec)
    if problem is not None:
        raise TinyLMError(f"cannot export to GGUF: the tokenizer {tokenizer_file} is not a GPT-2-style byte-level "
                          f"BPE ({problem})")
    by_id: dict[int, tuple[str, int]] = {i: (token, NORMAL) for token, i in spec["model"]["vocab"].items()}
    specials = {added["content"]: added["id"] for added in spec.get("added_tokens") or []}
    by_id.update({i: (token, CONTROL) for token, i in specials.items()})
    if max(by_id) >= vocab_size:
        raise TinyLMError(f"cannot export to GGUF: the tokenizer has id {max(by_id)}, beyond the model's "
                          f"vocab_size={vocab_size}")
    rows = [by_id.get(i, (f"[PAD{i}]", UNUSED)) for i in range(vocab_size)]
    eot_id, _ = eot_token(tokenizer_file)
    end_id = eot_id
    if chat_template is not None:
        chat_template = portable_chat_template(chat_template)
        if END_OF_TURN in chat_template and END_OF_TURN in specials:
            end_id = specials[END_OF_TURN]
    return GGUFVocab(
        tokens=[token for token, _ in rows], token_types=[kind for _, kind in rows],
        merges=[" ".join(merge_pair(merge)) for merge in spec["model"].get("merges") or []],
        eot_id=eot_id, end_id=end_id, chat_template=chat_template, specials=specials,
    )
