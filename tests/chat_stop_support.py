"""A micro chat checkpoint whose greedy reply is known and ends with <|end|>, built without training.

Every block's weights are zero, so each block passes its input through and the logits depend on the
last token alone: the model is a bigram table we write by hand. After any token it has not been told
about it writes REPLY[0], then each REPLY token is followed by the next one, the last by <|end|>. The
reply holds a role token in the middle, so a server that decoded special tokens into text would show it.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import torch

from serve_support import CORPUS
from tinylm.checkpoint import save_checkpoint
from tinylm.config import ModelConfig
from tinylm.models.factory import build_model
from tinylm.tokenizer import Tokenizer, train_bpe
from tinylm.tokenizer.chat_format import ChatFormat

REPLY_TEXT = ("ret", "urn")  # two ordinary tokens of the micro BPE; <|system|> goes between them


def reply_ids(tokenizer: Tokenizer) -> list[int]:
    """The greedy reply: 'ret', <|system|>, 'urn', then <|end|>."""
    first, second = (tokenizer.encode_ordinary(text) for text in REPLY_TEXT)
    assert len(first) == len(second) == 1, "the reply pieces must be single tokens"
    specials = tokenizer.special_tokens
    return [first[0], specials["<|system|>"], second[0], specials["<|end|>"]]


def chat_checkpoint(root: Path, chain_of: Callable[[Tokenizer], list[int]] = reply_ids,
                    name: str = "chat-run", corpus: list[str] = CORPUS,
                    context_length: int = 64, noise: float = 0.0, weight: float = 10.0) -> tuple[Path, Tokenizer]:
    """(run folder, tokenizer) of a chat checkpoint (it carries the chat template, as SFT's do) whose greedy
    reply is `chain_of(tokenizer)` (ending with <|end|>; no token twice: a bigram has one follower). With
    `noise`, every block weight gets that much Gaussian noise (seeded): attention and positions then matter,
    and sampling strays from the chain now and then, the more the smaller the chain's `weight`."""
    tokenizer = train_bpe(corpus, vocab_size=320)
    tokenizer_file = tokenizer.save(root / "chat-tokenizer.json")
    config = ModelConfig(arch="modern", vocab_size=320, context_length=context_length, n_embed=32, n_head=4,
                         n_kv_head=2, n_blocks=2, tie_embeddings=False)
    model = build_model(config)
    chain = chain_of(tokenizer)
    assert len(set(chain)) == len(chain) < config.n_embed, "the chain's tokens must be distinct and fit the width"
    run_dir = root / name
    with torch.no_grad():
        for key, p in model.named_parameters():
            if key.startswith("blocks."):
                p.zero_()
        embed, head = model.token_embed.weight, model.lm_head.weight
        embed.zero_()
        embed[:, 0] = 1.0  # every token not in the chain: direction 0
        head.zero_()
        head[chain[0], 0] = weight  # ... is followed by the reply's first token
        for k, (token, following) in enumerate(zip(chain, chain[1:]), start=1):
            embed[token] = 0.0
            embed[token, k] = 1.0
            head[following, k] = weight
        if noise:
            generator = torch.Generator().manual_seed(0)
            for key, p in model.named_parameters():
                if key.startswith("blocks.") and p.dim() > 1:
                    p.add_(noise * torch.randn(p.shape, generator=generator))
    meta = {"stage": "sft", "chat_template": ChatFormat.from_tokenizer(tokenizer).jinja_template()}
    save_checkpoint(run_dir, 1, model, config, tokenizer_file=tokenizer_file, meta=meta)
    return run_dir, tokenizer
