"""Train tinylm's default tokenizer: a GPT-2-style byte-level BPE, with Hugging Face `tokenizers`.

Byte-level means the base alphabet is the 256 byte values, so every string can be encoded and
decoded back exactly, with no unknown token. Text is first split with GPT-2's regex (words, numbers,
punctuation, whitespace runs, each with at most one leading space) and merges never cross those
pieces. Merges start from the most frequent adjacent pair and stop at `vocab_size` tokens, counting
the 256 bytes and the special tokens: "<|endoftext|>" (id 0), which prepare puts after every document,
and the chat tokens <|system|>, <|user|>, <|assistant|>, <|end|> (ids 1-4, tokenizer/chat_tokens.py),
reserved now so that a model pretrained with this tokenizer can be fine-tuned to chat without growing.
A pair must occur at least twice to be merged: a merge seen once memorises rather than compresses.
With `split_digits` every digit is a piece of its own before the regex runs (as in StarCoder,
SmolLM, Llama 1 and Qwen), so no token holds two digits: a number is spelled the same way wherever it
appears, which a small model needs to copy or compute with numbers digit by digit.
`tokenizers` trains on all cores in about a second for 10 MB; the result is then run by tiktoken.
"""

from __future__ import annotations

from collections.abc import Iterable

from tinylm.errors import TinyLMError
from tinylm.tokenizer.chat_tokens import RESERVED_SPECIALS
from tinylm.tokenizer.hf_json import tokenizer_from_hf_json
from tinylm.tokenizer.tokenizer import Tokenizer

MIN_VOCAB = 256 + len(RESERVED_SPECIALS)  # every byte plus <|endoftext|> and the chat tokens
MAX_VOCAB = 1 << 24


def check_vocab_size(vocab_size: int) -> None:
    """One clear line for a vocabulary a byte-level BPE cannot have."""
    if isinstance(vocab_size, bool) or not isinstance(vocab_size, int):
        raise TinyLMError(f"vocab size must be an integer, got {vocab_size!r}")
    if vocab_size < MIN_VOCAB:
        raise TinyLMError(f"vocab size {vocab_size} is too small: a byte-level BPE needs at least "
                          f"{MIN_VOCAB} (256 bytes + {len(RESERVED_SPECIALS)} special tokens: "
                          f"{', '.join(RESERVED_SPECIALS)})")
    if vocab_size > MAX_VOCAB:
        raise TinyLMError(f"vocab size {vocab_size} is too large (at most {MAX_VOCAB})")


def train_bpe(texts: Iterable[str], vocab_size: int = 4096, progress: bool = False,
              split_digits: bool = False) -> Tokenizer:
    """A byte-level BPE of `vocab_size` tokens trained on `texts` (fewer if the text runs out of pairs)."""
    from tokenizers import Tokenizer as HFTokenizer
    from tokenizers import decoders, models, pre_tokenizers, trainers

    check_vocab_size(vocab_size)
    hf = HFTokenizer(models.BPE())
    byte_level = pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=True)
    hf.pre_tokenizer = (pre_tokenizers.Sequence([pre_tokenizers.Digits(individual_digits=True), byte_level])
                        if split_digits else byte_level)
    hf.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(vocab_size=vocab_size, min_frequency=2, special_tokens=list(RESERVED_SPECIALS),
                                  initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
                                  show_progress=progress)
    hf.train_from_iterator(texts, trainer)
    tokenizer = tokenizer_from_hf_json(hf.to_str(), where="the trained BPE")
    if tokenizer.backend != "tiktoken":  # our own format must always take the fast path
        raise RuntimeError(f"trained BPE cannot run on tiktoken: {tokenizer.fallback_reason}")
    return tokenizer
