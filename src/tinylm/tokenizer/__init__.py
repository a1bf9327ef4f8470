"""Text <-> token ids: tinylm's byte-level BPE (trained with `tokenizers`, run with tiktoken) and r50k."""

from tinylm.tokenizer.load import load_tokenizer
from tinylm.tokenizer.tokenizer import Tokenizer
from tinylm.tokenizer.train import train_bpe

__all__ = ["Tokenizer", "load_tokenizer", "train_bpe"]
