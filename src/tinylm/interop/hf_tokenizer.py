"""The tokenizer files `transformers.AutoTokenizer` reads: tokenizer.json as is, plus tokenizer_config.json.

tinylm's tokenizer.json is a Hugging Face `tokenizers` file, so `PreTrainedTokenizerFast` runs the very
same tokenizer and produces the same ids. What `transformers` adds on top is named in
tokenizer_config.json: our end-of-text token serves as BOS, EOS and PAD (a model trained on
documents separated by EOT knows no other), and nothing is added around the text on encode, so
`AutoTokenizer(text).input_ids` equals our `encode(text)`. A chat model's checkpoint also carries its
chat template (tokenizer/chat_format.py): it goes into `chat_template`, and the special tokens it
writes are named `extra_special_tokens`, so `apply_chat_template` gives the ids and the assistant
mask tinylm trained on. Its replies end with <|end|>, so that is its EOS (`end_token_ids` gives the
ids that stop generation: both), the convention of instruct models that tools like vLLM read.
"""

from __future__ import annotations

import json
import re
import shutil
from pathlib import Path
from typing import Any

from tokenizers import Tokenizer

from tinylm.errors import TinyLMError
from tinylm.tokenizer.chat_format import ChatFormat
from tinylm.tokenizer.chat_tokens import END_OF_TURN
from tinylm.tokenizer.load import load_tokenizer

EOT_CANDIDATES = ("<|endoftext|>", "<|eot|>", "</s>", "<eos>")


def _load(path: Path) -> Tokenizer:
    try:
        return Tokenizer.from_file(str(path))
    except Exception as exc:  # noqa: BLE001 - any failure means it is not a tokenizers file
        raise TinyLMError(f"{path} is not a Hugging Face tokenizers file, so transformers cannot load it "
                          f"({type(exc).__name__})") from None


def eot_token(path: Path, eot_id: int | None = None) -> tuple[int, str]:
    """(id, text) of the end-of-text token: `eot_id` when the caller knows it, else the special token so named."""
    tokenizer = _load(path)
    if eot_id is None:
        try:  # the project's own loader knows which token ends a document
            eot_id = load_tokenizer(path).eot_id
        except (ImportError, AttributeError, TinyLMError, ValueError, KeyError):
            eot_id = next((tokenizer.token_to_id(t) for t in EOT_CANDIDATES if tokenizer.token_to_id(t) is not None),
                          None)
    if eot_id is None:
        raise TinyLMError(f"{path} has no end-of-text token ({', '.join(EOT_CANDIDATES)})")
    text = tokenizer.id_to_token(eot_id)
    if text is None:
        raise TinyLMError(f"{path}: end-of-text id {eot_id} is outside the vocabulary")
    return eot_id, text


def template_special_tokens(source: Path, chat_template: str, eot: str) -> list[str]:
    """The special tokens (besides EOT) that `chat_template` writes; TinyLMError if one is not in the tokenizer."""
    specials = {t["content"] for t in json.loads(source.read_text(encoding="utf-8")).get("added_tokens") or []
                if t.get("special")}
    written = sorted(set(re.findall(r"<\|[^|'\s]+\|>", chat_template)) - {eot})
    missing = [token for token in written if token not in specials]
    if missing:
        raise TinyLMError(f"the chat template writes {', '.join(missing)}, which {source} lacks as special tokens")
    return written


def write_hf_tokenizer(source: Path, folder: Path, context_length: int, eot_id: int | None = None,
                       chat_template: str | None = None) -> int:
    """Copy tokenizer.json and write tokenizer_config.json (with `chat_template` if given) into `folder`.

    Returns the EOT id.
    """
    eot_id, eot = eot_token(source, eot_id)
    shutil.copyfile(source, folder / "tokenizer.json")
    config: dict[str, Any] = {
        "tokenizer_class": "PreTrainedTokenizerFast",
        "bos_token": eot, "eos_token": eot, "pad_token": eot, "unk_token": None,
        "add_bos_token": False, "add_eos_token": False,
        "model_max_length": context_length,
        "clean_up_tokenization_spaces": False,
    }
    if chat_template is not None:
        config["extra_special_tokens"] = template_special_tokens(source, chat_template, eot)
        config["chat_template"] = chat_template
        if END_OF_TURN in config["extra_special_tokens"]:
            config["eos_token"] = END_OF_TURN  # what ends a reply; BOS and padding stay end-of-text
    (folder / "tokenizer_config.json").write_text(json.dumps(config, indent=2) + "\n", encoding="utf-8")
    return eot_id


def reply_end_token(chat_template: str | None) -> str | None:
    """The token a chat model's replies end with (<|end|>, when its template writes it), or None for a base model.

    Every export names it as an end token (transformers, GGUF): a chat model may never write end-of-text,
    so with EOT alone generation would run on through the turns that follow, to the length limit.
    """
    return END_OF_TURN if chat_template and END_OF_TURN in chat_template else None


def end_token_ids(source: Path, eot_id: int, chat_template: str | None) -> int | list[int]:
    """The ids that end a generation: end-of-text, and for a chat model end-of-turn too (end-of-text first)."""
    end = reply_end_token(chat_template)
    end_id = _load(source).token_to_id(end) if end is not None else None
    return eot_id if end_id is None else [eot_id, end_id]


def hf_eot_id(hf_dir: Path) -> int | None:
    """The EOS id a `transformers` folder declares (config.json, then generation_config.json)."""
    for name in ("config.json", "generation_config.json"):
        file = hf_dir / name
        if file.is_file():
            value = json.loads(file.read_text(encoding="utf-8")).get("eos_token_id")
            if isinstance(value, list):
                value = value[0] if value else None
            if isinstance(value, int):
                return value
    return None


def tinylm_chat_template(hf_dir: Path) -> str | None:
    """The chat template of `hf_dir` when it is tinylm's own for its tokenizer (a chat export), else None.

    Import keeps it, so the imported run is a chat model again. Another format's template is not
    kept: tinylm renders only its own, and taking a foreign one for it would prompt the model wrongly.
    """
    config_file, tokenizer_file = hf_dir / "tokenizer_config.json", hf_dir / "tokenizer.json"
    if not config_file.is_file() or not tokenizer_file.is_file():
        return None
    try:
        template = json.loads(config_file.read_text(encoding="utf-8")).get("chat_template")
        ours = ChatFormat.from_tokenizer(load_tokenizer(tokenizer_file)).jinja_template()
    except (OSError, UnicodeDecodeError, ValueError, AttributeError, TinyLMError):
        return None  # no readable template, or a tokenizer without the chat tokens: a base model
    return template if template == ours else None
