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
from tinylm.inference.loading import load_for_generation
from tinylm.serve.protocol import APIError
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
    int8: bool = False  # how `reload` loads a checkpoint: as the first one was
    checkpoint: str | None = None  # the checkpoint served now (None: a model handed in by a test)
    reload_lock: threading.Lock = field(default_factory=threading.Lock)

    @classmethod
    def build(cls, name: str, model: nn.Module, tokenizer: Any, max_slots: int = 16,
              prefill_budget: int = 64, meta: Mapping[str, Any] | None = None, logprobs_mode: str = "raw",
              int8: bool = False) -> ServedModel:
        """`meta` is the checkpoint's config.json: a chat template there makes it a chat model."""
        try:
            chat_format, problem = ChatFormat.from_tokenizer(tokenizer), None
        except TinyLMError as exc:
            chat_format, problem = None, str(exc)
        scheduler = Scheduler(model, max_slots=max_slots, prefill_budget=prefill_budget, logprobs_mode=logprobs_mode)
        chat_model = chat_format is not None and bool((meta or {}).get("chat_template"))
        path = (meta or {}).get("path")
        return cls(name, model, tokenizer, scheduler, chat_format, problem, chat_model, int8,
                   None if path is None else str(path))

    def reload(self, checkpoint: str, timeout: float = 600.0) -> dict[str, Any]:
        """Serve the weights of `checkpoint` (same model config) once the running requests have finished.

        APIError 400 for a checkpoint that cannot be loaded, 409 for one of another model, 503 when the
        running requests did not finish within `timeout`.
        """
        with self.reload_lock:  # one reload at a time: each waits for the previous one's swap
            dtype = next(self.model.parameters()).dtype
            try:
                model, _, meta = load_for_generation(checkpoint, int8=self.int8, device=str(self.scheduler.device),
                                                     dtype=dtype)
            except TinyLMError as exc:
                raise APIError(400, str(exc), "checkpoint") from None
            if model.config != self.model.config:
                raise APIError(409, f"{meta['path']} holds another model ({_config_difference(model, self.model)}); "
                               "a server reloads weights of the model it serves only", "checkpoint",
                               "model_mismatch")
            swapped = self.scheduler.swap_model(model, timeout)
            self.model, self.checkpoint = model, str(meta["path"])  # the same config: the routes' checks hold
            if not swapped:
                raise APIError(503, f"the running requests did not finish within {timeout:g} s; the new weights "
                               "will be served once they have", code="reload_pending")
            return {"checkpoint": self.checkpoint, "dtype": str(dtype).removeprefix("torch.")}

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


def _config_difference(new: nn.Module, served: nn.Module) -> str:
    a, b = new.config.to_dict(), served.config.to_dict()
    key = next(k for k in sorted(set(a) | set(b)) if a.get(k) != b.get(k))
    return f"{key} {a.get(key)!r}, the served model's {b.get(key)!r}"

