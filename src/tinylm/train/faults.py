"""What the loop does when things go wrong: Ctrl-C/SIGTERM, NaN losses, out-of-memory.

- A signal only sets a flag. The loop finishes its current step, all ranks agree to stop (the flag
  travels with the loss all-reduce), and the run saves a checkpoint and exits: no rank is killed in
  the middle of a collective, no checkpoint is half-written. A second Ctrl-C interrupts at once.
- Work inside a step that may wait without end (an RL reward) looks at `stop_requested()` while it
  waits and, once the ranks agree, raises `StepInterrupted`: the step is dropped before its update,
  and the loop saves the last finished step, so the first Ctrl-C is enough.
- A NaN or inf loss (or gradient norm) is detected before the optimizer step, so the weights in
  memory and on disk are still the last good ones; the run stops instead of training on garbage.
- Out-of-memory becomes one line that lists the flags which lower memory for this run.
"""

from __future__ import annotations

import signal
import threading
from types import FrameType
from typing import Any


class StepInterrupted(KeyboardInterrupt):
    """A stop was asked while the step waited on work it can drop: the step is abandoned before its update.

    A KeyboardInterrupt, so that anything that does not know it still ends the run as Ctrl-C does (exit 130)."""


_active: list[StopSignal] = []  # the StopSignal of the run in progress (the innermost, if runs nest)


def stop_requested() -> str | None:
    """The signal that asked the run in progress to stop ("SIGINT"), or None (also outside a run)."""
    return _active[-1].requested if _active else None


class StopSignal:
    """Turns SIGINT/SIGTERM into a polite request to stop at the next step boundary."""

    def __init__(self) -> None:
        self.requested: str | None = None
        self._previous: dict[int, Any] = {}

    def __enter__(self) -> StopSignal:
        if threading.current_thread() is threading.main_thread():
            for sig in (signal.SIGINT, signal.SIGTERM):
                self._previous[sig] = signal.signal(sig, self._handle)
        _active.append(self)
        return self

    def _handle(self, signum: int, frame: FrameType | None) -> None:
        if self.requested is not None:  # asked twice: the user means it
            self.__exit__()
            raise KeyboardInterrupt
        self.requested = signal.Signals(signum).name

    def __exit__(self, *exc: object) -> None:
        for sig, handler in self._previous.items():
            signal.signal(sig, handler)
        self._previous.clear()
        if self in _active:
            _active.remove(self)


def oom_message(batch_size: int, grad_accum: int, seq_len: int, dtype: str, gradient_checkpointing: bool,
                fsdp: bool, world_size: int, device_type: str) -> str:
    """One line naming the flags that lower memory, with values that keep tokens per step the same."""
    tips = []
    if batch_size > 1:
        tips.append(f"--batch-size {batch_size // 2} --grad-accum {grad_accum * 2} (same tokens per step)")
    if not gradient_checkpointing:
        tips.append("--gradient-checkpointing (recompute activations in backward)")
    if device_type == "cuda" and dtype in ("fp32", "auto"):
        tips.append("--dtype bf16 (half-size activations)")
    if seq_len > 64:
        tips.append(f"--seq-len {seq_len // 2}")
    if device_type == "cuda" and world_size > 1 and not fsdp:
        tips.append("--fsdp (shard weights and optimizer state across GPUs)")
    tips.append("a smaller --preset")
    return "out of memory; to lower memory use " + "; ".join(tips)
