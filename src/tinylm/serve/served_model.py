"""What the routes need to know about the model they serve: its name, tokenizer, window and chat format.

`reload` puts new weights in (an RL trainer syncing the server it samples from): the checkpoint must
hold the same model config, and is loaded the way the first one was (int8, decode dtype).
"""

from __future__ import annotations

import threading
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from torch import nn

from tinylm.errors import TinyLMError
from tinylm.serve.protocol import APIError
from tinylm.serve.reload import ReloadRefused
from tinylm.serve.scheduler import Scheduler
from tinylm.tokenizer.chat_format import ChatFormat
from tinylm.tools.registry import Tool


@dataclass
class ServedModel:
    name: str
    model: nn.Module
    tokenizer: Any
    scheduler: Scheduler
    chat_format: ChatFormat | None
    chat_problem: str | None = None  # why /v1/chat/completions cannot serve this tokenizer
    chat_model: bool = False  # fine-tuned to chat (its checkpoint carries a chat template)
    int8: bool = False  # how `reload` loads a checkpoint: as the first one was
    checkpoint: str | None = None  # the checkpoint served now (None: a model handed in by a test)
    reload_lock: threading.Lock = field(default_factory=threading.Lock)
    tools: list[Tool] = field(default_factory=list)  # built-in tools requests may ask the server to run

    @classmethod
    def build(cls, name: str, model: nn.Module, tokenizer: Any, max_slots: int = 16,
              prefill_budget: int = 64, meta: Mapping[str, Any] | None = None, logprobs_mode: str = "raw",
              int8: bool = False, engine: Any = None, tools: list[Tool] | None = None) -> ServedModel:
        """`meta` is the checkpoint's config.json: a chat template there makes it a chat model. `engine`: an
        `EngineClient` whose process owns the model (then `model` only says its config), instead of a
        scheduler thread in this process."""
        try:
            chat_format, problem = ChatFormat.from_tokenizer(tokenizer), None
        except TinyLMError as exc:
            chat_format, problem = None, str(exc)
        scheduler = engine or Scheduler(model, max_slots=max_slots, prefill_budget=prefill_budget,
                                        logprobs_mode=logprobs_mode)
        chat_model = chat_format is not None and bool((meta or {}).get("chat_template"))
        path = (meta or {}).get("path")
        return cls(name, model, tokenizer, scheduler, chat_format, problem, chat_model, int8,
                   None if path is None else str(path), tools=list(tools or []))

    def reload(self, checkpoint: str, timeout: float = 600.0) -> dict[str, Any]:
        """Serve the weights of `checkpoint` (same model config) once the running requests have finished.

        APIError 400 for a checkpoint that cannot be loaded, 409 for one of another model, 503 when the
        running requests did not finish within `timeout`.
        """
        with self.reload_lock:  # one reload at a time: each waits for the previous one's swap
            try:
                served = self.scheduler.reload(checkpoint, self.int8, timeout)
            except ReloadRefused as exc:
                raise APIError(exc.status, exc.message, exc.param, exc.code) from None
            except RuntimeError as exc:  # shutting down, or the engine process is gone
                raise APIError(503, str(exc), code="unavailable", type="server_error") from None
            self.model, self.checkpoint = self.scheduler.model, served["checkpoint"]
            return served

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
