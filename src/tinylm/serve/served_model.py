"""What the routes need to know about the model they serve: its name, tokenizer, window and chat format."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from torch import nn

from tinylm.errors import TinyLMError
from tinylm.serve.scheduler import Scheduler
from tinylm.tokenizer.chat_format import ChatFormat


@dataclass
class ServedModel:
    name: str
    model: nn.Module
    tokenizer: Any
    scheduler: Scheduler
    chat_format: ChatFormat | None
    chat_problem: str | None = None  # why /v1/chat/completions cannot serve this tokenizer

    @classmethod
    def build(cls, name: str, model: nn.Module, tokenizer: Any, max_slots: int = 16,
              prefill_budget: int = 64) -> ServedModel:
        try:
            chat_format, problem = ChatFormat.from_tokenizer(tokenizer), None
        except TinyLMError as exc:
            chat_format, problem = None, str(exc)
        scheduler = Scheduler(model, max_slots=max_slots, prefill_budget=prefill_budget)
        return cls(name, model, tokenizer, scheduler, chat_format, problem)

    @property
    def window(self) -> int:
        return self.model.config.context_length

    @property
    def vocab_size(self) -> int:
        return self.model.config.vocab_size
