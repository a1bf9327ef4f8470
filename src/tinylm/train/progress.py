"""The live progress bar on stderr: step, loss, learning rate, tokens/s, MFU and the ETA.

stderr keeps stdout clean for the final sample and summary, so `tinylm train > out.txt` still shows
progress. Only rank 0 draws; with `--no-progress` the bar is off and metrics.jsonl still records it all.
Without a terminal the bar becomes a plain line per tenth of the run. Each line's tokens/s and MFU are measured
over the steps since the line before it (`Throughput`), never a figure an earlier line already showed.
"""

from __future__ import annotations

import sys
import time
from typing import Any, TextIO


def format_si(value: float) -> str:
    """1234567 -> '1.23M': short numbers for a narrow bar."""
    for unit, scale in (("G", 1e9), ("M", 1e6), ("k", 1e3)):
        if abs(value) >= scale:
            return f"{value / scale:.3g}{unit}"
    return f"{value:.3g}"


class Throughput:
    """Tokens and seconds over an interval of steps. A printed line measures the steps since the line before it:
    metrics.jsonl's figure (a row every --log-every steps) is refreshed less often than a short run prints, and
    repeated, it looked stuck."""

    def __init__(self) -> None:
        self.tokens, self.seconds = 0.0, 0.0

    def add(self, tokens: float, seconds: float) -> None:
        self.tokens += tokens
        self.seconds += seconds

    def rate(self) -> float:
        return self.tokens / max(self.seconds, 1e-9)


class Progress:
    """A tqdm bar on a terminal; elsewhere (a log file, a pipe, CI) a plain line every tenth of the run.

    A bar redrawn with carriage returns is unreadable in a log, and `tinylm compare` runs many
    trainings without a terminal: there a line at each 10% of the steps, or every `every_s` seconds
    when the run is long or ends by time, shows that it moves.
    """

    def __init__(self, total: int, initial: int = 0, enabled: bool = True, stream: TextIO | None = None,
                 every_s: float = 30.0) -> None:
        self._stream = stream if stream is not None else sys.stderr
        self._bar: Any = None
        self._lines = False
        self._total, self._every_s = total, every_s
        self._stride = max(1, total // 10)
        self._next_step, self._last_time = initial + self._stride, time.monotonic()
        if enabled and _is_terminal(self._stream):
            from tqdm import tqdm

            self._bar = tqdm(total=total, initial=initial, file=self._stream, dynamic_ncols=True,
                             unit="step", desc="train", leave=True)
        else:
            self._lines = enabled

    def update(self, step: int, loss: float, lr: float, tokens_per_s: float, mfu: float | None) -> bool:
        """Draw the bar, or print a line when one is due; whether it showed these numbers (the caller then measures
        the next interval afresh)."""
        postfix = f"loss {loss:.4f} lr {lr:.2e} {format_si(tokens_per_s)} tok/s"
        if mfu is not None:
            postfix += f" MFU {100 * mfu:.1f}%"
        if self._bar is not None:
            self._bar.n = step
            self._bar.set_postfix_str(postfix, refresh=False)
            self._bar.refresh()
            return True
        if self._lines and self._due(step):
            print(f"train: step {step}/{self._total} ({100 * step / max(self._total, 1):.0f}%) {postfix}",
                  file=self._stream, flush=True)
            return True
        return False

    def _due(self, step: int) -> bool:
        now = time.monotonic()
        if step < self._next_step and step != self._total and now - self._last_time < self._every_s:
            return False
        while self._next_step <= step:
            self._next_step += self._stride
        self._last_time = now
        return True

    def write(self, line: str) -> None:
        """A message that does not tear the bar."""
        if self._bar is not None:
            self._bar.write(line, file=self._stream)
        else:
            print(line, file=self._stream, flush=True)

    def close(self) -> None:
        if self._bar is not None:
            self._bar.close()
            self._bar = None


def _is_terminal(stream: TextIO) -> bool:
    try:
        return stream.isatty()
    except (AttributeError, ValueError):  # a closed or fake stream
        return False
