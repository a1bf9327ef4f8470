"""Text <-> token ids: tinylm's byte-level BPE (trained with `tokenizers`, run with tiktoken), r50k, the chat format.

`Tokenizer` (tokenizer.py) is the one object every stage uses. `train_bpe` trains tinylm's BPE
(train.py); `load_tokenizer` (load.py) reads a saved tokenizer.json back: a Hugging Face tokenizers
file (hf_json.py), run by tiktoken when the file allows it (tiktoken_bridge.py, over GPT-2's byte
alphabet in bytelevel.py), or the marker of r50k (r50k.py, from a local file only). The chat tokens
(chat_tokens.py) and the chat format (chat_format.py) turn conversations into ids and a loss mask.

A tokenizer knows text, not models: tokenizer imports errors and paths (r50k's local copy) only;
never models, data, checkpoint, train, stages or cli. `tokenizers` and tiktoken are imported
where they are used.
"""

from tinylm.tokenizer.load import load_tokenizer
from tinylm.tokenizer.tokenizer import Tokenizer
from tinylm.tokenizer.train import train_bpe

__all__ = ["Tokenizer", "load_tokenizer", "train_bpe"]
