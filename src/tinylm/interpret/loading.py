"""A checkpoint made ready to inspect: float32 on the CPU, in eval mode, with the attention that hooks see.

Inspection reads exact values (identities to 1e-5, comparisons with `transformers`), so the weights stay
float32 whatever the decode policy would choose. The classic model's hand-written attention and its fused
path compute the same function; inspection runs the fused one, whose `Attend` call the pattern hook reads.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch
from torch import nn

from tinylm.data.loader import Batch, iter_sequential
from tinylm.errors import TinyLMError
from tinylm.evaluate.bpb import checked_dev_data, pretraining_data
from tinylm.inference.loading import load_with_tokenizer
from tinylm.tokenizer.chat_format import ChatFormat


@dataclass
class Inspected:
    model: nn.Module
    tokenizer: Any
    meta: dict[str, Any]

    @property
    def path(self) -> Path:
        return Path(self.meta["path"])

    def encode(self, text: str, what: str = "prompt", chat: bool = False) -> list[int]:
        """The prompt's ids; with `chat`, `text` as a user message in the checkpoint's chat format, followed by
        the assistant's turn opening (what a chat model answers from)."""
        if not text:
            raise TinyLMError(f"the {what} is empty: give some text")
        if chat:
            if not self.meta.get("chat_template"):
                raise TinyLMError(f"{self.path} is not a chat model (its checkpoint has no chat template): "
                                  "look at the text as it is, without --chat")
            ids = ChatFormat.from_tokenizer(self.tokenizer).prompt_ids([{"role": "user", "content": text}])
        else:
            ids = self.tokenizer.encode(text)
        limit = self.model.config.context_length
        if len(ids) > limit:
            raise TinyLMError(f"the {what} is {len(ids)} tokens, more than the model's context of {limit}")
        return ids

    def token_id(self, text: str, what: str = "target") -> int:
        """The id of `text` as exactly one token (a leading space counts), or one line why not."""
        ids = self.tokenizer.encode(text)
        if len(ids) != 1:
            pieces = " ".join(repr(self.label(i)) for i in ids)
            raise TinyLMError(f"the {what} {text!r} is {len(ids)} tokens ({pieces}), not one: give a single token")
        return ids[0]

    def label(self, token_id: int) -> str:
        """A token as text for labels: its bytes decoded, invalid UTF-8 replaced."""
        return self.tokenizer.token_bytes(token_id).decode("utf-8", errors="replace")

    def labels(self, ids: list[int]) -> list[str]:
        return [self.label(i) for i in ids]


def load_for_inspection(path: str | Path) -> Inspected:
    model, tokenizer, meta = load_with_tokenizer(str(path))
    model = model.float()
    for module in model.modules():
        if hasattr(module, "impl"):  # the classic model: its fused path calls Attend
            module.impl = "sdpa"
        if hasattr(module, "kernel"):  # a training run may have switched to the blockwise kernel
            module.kernel = "sdpa"
    return Inspected(model, tokenizer, meta)


DEV_WINDOWS = 64  # dev windows the neurons and induction views read by default: 16K tokens at context 256
DEV_BATCH = 8  # windows a forward pass


def dev_batches(inspected: Inspected, data_dir: str | Path | None, windows: int,
                what: str) -> tuple[Path, Iterator[Batch]]:
    """(the data folder, its first `windows` context-long dev windows, DEV_BATCH a batch): a prepared dev split
    (default: the checkpoint's pretraining data), checked to be in the checkpoint's tokenizer."""
    data = checked_dev_data(data_dir or pretraining_data(inspected.meta), inspected.tokenizer, what)
    return data, iter_sequential(data, batch_size=DEV_BATCH, seq_len=inspected.model.config.context_length,
                                 max_batches=max(1, windows // DEV_BATCH))


def as_batch(ids: list[int]) -> torch.Tensor:
    return torch.tensor([ids], dtype=torch.long)
