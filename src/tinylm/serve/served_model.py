"""What the routes need to know about the model they serve: its name, tokenizer, window and chat format."""

from __future__ import annotations

from collections.abc import Mapping
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
    chat_model: bool = False  # fine-tuned to chat (its checkpoint carries a chat template)

    @classmethod
    def build(cls, name: str, model: nn.Module, tokenizer: Any, max_slots: int = 16,
              prefill_budget: int = 64, meta: Mapping[str, Any] | None = None) -> ServedModel:
        """`meta` is the checkpoint's config.json: a chat template there makes it a chat model."""
        try:
            chat_format, problem = ChatFormat.from_tokenizer(tokenizer), None
        except TinyLMError as exc:
            chat_format, problem = None, str(exc)
        scheduler = Scheduler(model, max_slots=max_slots, prefill_budget=prefill_budget)
        chat_model = chat_format is not None and bool((meta or {}).get("chat_template"))
        return cls(name, model, tokenizer, scheduler, chat_format, problem, chat_model)

    @property
    def completion_stop_ids(self) -> frozenset[int]:
        """What ends a completion: end-of-text, and a chat model's end-of-turn (its replies end there).

        A base model's tokenizer may reserve <|end|> without the model ever learning it: there it
        ends nothing (though, like every special token, it is not text).
        """
        if self.chat_model and self.chat_format is not None:
            return frozenset(self.chat_format.stop_ids)
        eot = self.tokenizer.eot_id
        return frozenset(() if eot is None else (eot,))

    @property
    def window(self) -> int:
        return self.model.config.context_length

    @property
    def vocab_size(self) -> int:
        return self.model.config.vocab_size
