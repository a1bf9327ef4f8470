"""New weights for a running scheduler: load a checkpoint as the served one was loaded, check it, swap it in.

Shared by the in-process server and the engine process (engine_process.py), so both refuse the same
things with the same words: a folder that cannot be loaded (400), another model (409), running
requests that do not finish in time (503; the new weights go in once they have).
"""

from __future__ import annotations

from typing import Any

from torch import nn

from tinylm.errors import TinyLMError
from tinylm.inference.loading import load_for_generation


class ReloadRefused(Exception):
    """Why a reload did not happen, with the HTTP status, parameter and code the admin route answers."""

    def __init__(self, status: int, message: str, param: str | None = "checkpoint", code: str | None = None) -> None:
        super().__init__(message)
        self.status, self.message, self.param, self.code = status, message, param, code

    def __reduce__(self) -> tuple:  # it crosses the engine process's pipe
        return ReloadRefused, (self.status, self.message, self.param, self.code)


def reload_weights(scheduler: Any, checkpoint: str, int8: bool, timeout: float) -> dict[str, Any]:
    """Load `checkpoint` in the served model's dtype (int8 if it is), check it is the same model, and have
    `scheduler` serve it once its running requests have finished; what is served now."""
    served = scheduler.model
    dtype = next(served.parameters()).dtype
    try:
        model, _, meta = load_for_generation(checkpoint, int8=int8, device=str(scheduler.device), dtype=dtype)
    except TinyLMError as exc:
        raise ReloadRefused(400, str(exc)) from None
    if model.config != served.config:
        raise ReloadRefused(409, f"{meta['path']} holds another model ({config_difference(model, served)}); a "
                            "server reloads weights of the model it serves only", code="model_mismatch")
    if not scheduler.swap_model(model, timeout):
        raise ReloadRefused(503, f"the running requests did not finish within {timeout:g} s; the new weights will "
                            "be served once they have", None, "reload_pending")
    return {"checkpoint": str(meta["path"]), "dtype": str(dtype).removeprefix("torch.")}


def config_difference(new: nn.Module, served: nn.Module) -> str:
    a, b = new.config.to_dict(), served.config.to_dict()
    key = next(k for k in sorted(set(a) | set(b)) if a.get(k) != b.get(k))
    return f"{key} {a.get(key)!r}, the served model's {b.get(key)!r}"
