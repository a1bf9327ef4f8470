"""One shape for every run-time choice: what was chosen, why in one line, and the numbers it was decided on.

tinylm decides four things by rule or by measuring on the machine at hand: the training autocast
dtype (`precision.py`), the attention kernel (`attention_policy.py`), whether to compile the blocks
(`compile_policy.py`) and the weights' dtype for decoding (`decode_precision.py`). Each returns a
`Choice`, so a caller reads `.value` and `.reason` the same way, the run header prints `kind: reason`,
and a run records all of them in one JSON dict (`record`).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Generic, TypeVar

T = TypeVar("T")


@dataclass(frozen=True)
class Choice(Generic[T]):
    """A decision and its reason; `measured` holds the timings it rests on (None: decided by rule)."""

    kind: str  # "precision" | "attention" | "compile" | "decode_precision": also the name of its cache
    value: T  # a torch.dtype, a kernel name, a bool...
    reason: str  # one line for the run header or the console
    measured: dict[str, float] | None = None
    cached: bool = False  # the timings came from the measurement cache, not from this process

    def record(self) -> dict[str, Any]:
        """JSON-ready: a dtype is written by its torch name ("float32"), as train_state.pt writes it."""
        return {"value": plain(self.value), "reason": self.reason, "measured": self.measured, "cached": self.cached}


def plain(value: Any) -> Any:
    """`torch.bfloat16` -> "bfloat16"; str, bool and numbers stay as they are."""
    if isinstance(value, (str, bool, int, float)) or value is None:
        return value
    return str(value).removeprefix("torch.")
