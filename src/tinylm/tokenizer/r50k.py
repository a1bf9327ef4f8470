"""GPT-2/GPT-3's `r50k_base` encoding through tiktoken, from a local file only.

tiktoken downloads its encoding files on first use, and the machines tinylm targets may have no
network, so tinylm never triggers that download: it looks for the file where tiktoken caches it
(`$TIKTOKEN_CACHE_DIR`, else `$DATA_GYM_CACHE_DIR`, else `<tmp>/data-gym-cache`, under the sha1 of
its URL) and at `$TINYLM_HOME/tiktoken/r50k_base.tiktoken`, checks its sha256 and builds the
encoding itself. Missing, it fails with one line that says how to provide the file.

The encoding has 50257 tokens (EOT = 50256). Models get a vocabulary padded to 50304, a multiple
of 64, which keeps the embedding and output matmuls on fast kernel shapes; the 47 padding ids are
never produced by encoding. `save` writes a small JSON marker instead of a tokenizer.json, since the
encoding is not a Hugging Face file; `load_tokenizer` recognises it. Special tokens added after EOT
(the chat tokens, see tokenizer/chat_tokens.py) are listed in the marker and take ids 50257, 50258, ...,
which the padded model vocabulary already has rows for.
"""

from __future__ import annotations

import base64
import hashlib
import json
import os
import tempfile
from pathlib import Path

from tinylm.errors import TinyLMError
from tinylm.paths import tinylm_home
from tinylm.tokenizer.tiktoken_bridge import GPT2_PATTERN
from tinylm.tokenizer.tokenizer import Tokenizer

R50K_NAME = "r50k_base"
R50K_URL = "https://openaipublic.blob.core.windows.net/encodings/r50k_base.tiktoken"
R50K_SHA256 = "306cd27f03c1a714eca7108e03d66b7dc042abe8c258b44c199a7ed9838dd930"
R50K_EOT = 50256
R50K_N_VOCAB = 50257
R50K_PADDED = 50304
MARKER_KEY = "tinylm_tiktoken_encoding"


ADDED_KEY = "added_special_tokens"


def padded_vocab(n_vocab: int) -> int:
    """The model vocabulary for `n_vocab` tokens: rounded up to a multiple of 64."""
    return -(-n_vocab // 64) * 64


def marker_json(eot_id: int = R50K_EOT, added: dict[str, int] | None = None) -> str:
    """The saved form of r50k: enough for `load_tokenizer` to rebuild it from the local file."""
    n_vocab = max([eot_id, *(added or {}).values()]) + 1
    data = {MARKER_KEY: R50K_NAME, "n_vocab": n_vocab, "eot_id": eot_id, "vocab_size": padded_vocab(n_vocab)}
    if added:
        data[ADDED_KEY] = dict(added)
    return json.dumps(data, indent=2) + "\n"


def check_added(added: object, eot_id: int) -> dict[str, int]:
    """Added special tokens as {text: id} with ids eot_id+1, eot_id+2, ... in order; TinyLMError otherwise."""
    if added is None:
        return {}
    if not isinstance(added, dict) or not all(isinstance(k, str) and type(v) is int for k, v in added.items()):
        raise TinyLMError(f"r50k {ADDED_KEY} must map token text to an integer id, got {added!r}")
    if sorted(added.values()) != list(range(eot_id + 1, eot_id + 1 + len(added))) or "<|endoftext|>" in added:
        raise TinyLMError(f"r50k {ADDED_KEY} must take the ids after <|endoftext|> ({eot_id + 1}, ...) in turn, "
                          f"got {added!r}")
    return dict(added)


def tinylm_home_file() -> Path:
    return tinylm_home() / "tiktoken" / "r50k_base.tiktoken"


def candidate_files() -> list[Path]:
    """Where the encoding file may be, in the order tiktoken itself would look, then tinylm's place."""
    cache_key = hashlib.sha1(R50K_URL.encode()).hexdigest()
    if "TIKTOKEN_CACHE_DIR" in os.environ:
        cache_dir = os.environ["TIKTOKEN_CACHE_DIR"]
    elif "DATA_GYM_CACHE_DIR" in os.environ:
        cache_dir = os.environ["DATA_GYM_CACHE_DIR"]
    else:
        cache_dir = os.path.join(tempfile.gettempdir(), "data-gym-cache")
    found = [Path(cache_dir) / cache_key] if cache_dir else []
    return [*found, tinylm_home_file()]


def parse_tiktoken_file(data: bytes, where: str) -> dict[bytes, int]:
    """tiktoken's format: one `base64(token) rank` per line."""
    ranks: dict[bytes, int] = {}
    for number, line in enumerate(data.splitlines(), 1):
        if not line.strip():
            continue
        try:
            token, rank = line.split()
            ranks[base64.b64decode(token, validate=True)] = int(rank)
        except ValueError:
            raise TinyLMError(f"{where}:{number}: not a tiktoken encoding line") from None
    return ranks


def find_r50k_file() -> Path:
    """The first candidate file that exists; TinyLMError saying how to provide one otherwise."""
    for path in candidate_files():
        if path.is_file():
            return path
    raise TinyLMError(
        f"the r50k tokenizer needs the file r50k_base.tiktoken and tinylm never downloads it: "
        f"save {R50K_URL} as {tinylm_home_file()}, or set TIKTOKEN_CACHE_DIR to a tiktoken cache "
        "folder that holds it")


def load_r50k(path: str | Path | None = None, verify: bool = True, added: dict[str, int] | None = None) -> Tokenizer:
    """r50k_base from `path` or the first local candidate; `verify` checks the published sha256.

    `added` ({text: id}) are special tokens after EOT, such as the chat tokens.
    """
    file = Path(path) if path is not None else find_r50k_file()
    try:
        data = file.read_bytes()
    except OSError as exc:
        raise TinyLMError(f"cannot read the r50k encoding file {file}: {exc.strerror}") from None
    if verify and hashlib.sha256(data).hexdigest() != R50K_SHA256:
        raise TinyLMError(f"{file} is not r50k_base.tiktoken (sha256 mismatch: corrupt or another encoding)")
    return r50k_from_ranks(parse_tiktoken_file(data, str(file)), added)


def r50k_from_ranks(ranks: dict[bytes, int], added: dict[str, int] | None = None) -> Tokenizer:
    """The tokenizer of a tiktoken rank table: EOT right after the ranks, then the `added` special tokens."""
    import tiktoken

    eot_id = max(ranks.values()) + 1
    added = check_added(added, eot_id)
    specials = {"<|endoftext|>": eot_id, **added}
    n_vocab = eot_id + 1 + len(added)
    encoding = tiktoken.Encoding(R50K_NAME, pat_str=GPT2_PATTERN, mergeable_ranks=ranks, special_tokens=specials)
    return Tokenizer(name=R50K_NAME, saved=marker_json(eot_id, added), eot_id=eot_id, n_vocab=n_vocab,
                     vocab_size=padded_vocab(n_vocab), encoding=encoding, special_tokens=specials)


def r50k_with_added(tokenizer: Tokenizer, tokens: list[str]) -> Tokenizer:
    """An r50k tokenizer with `tokens` appended as special tokens (tiktoken's own way to extend an encoding)."""
    added = {text: id_ for text, id_ in tokenizer.special_tokens.items() if id_ != tokenizer.eot_id}
    added.update({token: tokenizer.n_vocab + i for i, token in enumerate(tokens)})
    return r50k_from_ranks(tokenizer._encoding._mergeable_ranks, added)  # tiktoken's documented extension route
