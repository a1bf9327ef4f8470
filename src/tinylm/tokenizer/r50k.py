"""GPT-2/GPT-3's `r50k_base` encoding through tiktoken, from a local file only.

tiktoken downloads its encoding files on first use, and the machines tinylm targets may have no
network, so tinylm never triggers that download: it looks for the file where tiktoken caches it
(`$TIKTOKEN_CACHE_DIR`, else `$DATA_GYM_CACHE_DIR`, else `<tmp>/data-gym-cache`, under the sha1 of
its URL) and at `$TINYLM_HOME/tiktoken/r50k_base.tiktoken`, checks its sha256 and builds the
encoding itself. Missing, it fails with one line that says how to provide the file.

The encoding has 50257 tokens (EOT = 50256). Models get a vocabulary padded to 50304, a multiple
of 64, which keeps the embedding and output matmuls on fast kernel shapes; the 47 padding ids are
never produced by encoding. `save` writes a small JSON marker instead of a tokenizer.json, since the
encoding is not a Hugging Face file; `load_tokenizer` recognises it.
"""

from __future__ import annotations

import base64
import hashlib
import json
import os
import tempfile
from pathlib import Path

from tinylm.errors import TinyLMError
from tinylm.tokenizer.tiktoken_bridge import GPT2_PATTERN
from tinylm.tokenizer.tokenizer import Tokenizer

R50K_NAME = "r50k_base"
R50K_URL = "https://openaipublic.blob.core.windows.net/encodings/r50k_base.tiktoken"
R50K_SHA256 = "306cd27f03c1a714eca7108e03d66b7dc042abe8c258b44c199a7ed9838dd930"
R50K_EOT = 50256
R50K_N_VOCAB = 50257
R50K_PADDED = 50304
MARKER_KEY = "tinylm_tiktoken_encoding"


def marker_json() -> str:
    """The saved form of r50k: enough for `load_tokenizer` to rebuild it from the local file."""
    return json.dumps({MARKER_KEY: R50K_NAME, "n_vocab": R50K_N_VOCAB, "eot_id": R50K_EOT,
                       "vocab_size": R50K_PADDED}, indent=2) + "\n"


def tinylm_home_file() -> Path:
    from tinylm.data.paths import tinylm_home

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


def load_r50k(path: str | Path | None = None, verify: bool = True) -> Tokenizer:
    """r50k_base from `path` or the first local candidate; `verify` checks the published sha256."""
    import tiktoken

    file = Path(path) if path is not None else find_r50k_file()
    try:
        data = file.read_bytes()
    except OSError as exc:
        raise TinyLMError(f"cannot read the r50k encoding file {file}: {exc.strerror}") from None
    if verify and hashlib.sha256(data).hexdigest() != R50K_SHA256:
        raise TinyLMError(f"{file} is not r50k_base.tiktoken (sha256 mismatch: corrupt or another encoding)")
    ranks = parse_tiktoken_file(data, str(file))
    n_vocab = max(ranks.values()) + 2  # the ranks, then EOT
    eot_id = n_vocab - 1
    encoding = tiktoken.Encoding(R50K_NAME, pat_str=GPT2_PATTERN, mergeable_ranks=ranks,
                                 special_tokens={"<|endoftext|>": eot_id})
    padded = -(-n_vocab // 64) * 64
    return Tokenizer(name=R50K_NAME, saved=marker_json(), eot_id=eot_id, n_vocab=n_vocab, vocab_size=padded,
                     encoding=encoding)
