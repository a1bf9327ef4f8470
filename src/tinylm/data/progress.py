"""Progress of a pass over the corpus: a bar on a terminal, a plain line every few seconds otherwise.

A prepare of a large corpus runs for minutes, often with stderr going to a log file or a CI job,
where a tqdm bar is hidden (it would write carriage returns into the log). Without a terminal the
same counts are printed as one ordinary line every `LINE_SECONDS`, so a log always shows that the
work goes on and how fast. Counts are UTF-8 bytes of text (the corpus size, when known up front,
gives the percentage) and, for the encoding pass, tokens. BPE training has no counts to show, so
a `Heartbeat` says every `LINE_SECONDS` that it is still running.
"""

from __future__ import annotations

import sys
import threading
import time
from collections.abc import Callable
from typing import Any, TextIO

LINE_SECONDS = 5.0


def _megabytes(n_bytes: int) -> str:
    return f"{n_bytes / 1e6:,.1f} MB"


class Progress:
    """Counts bytes (and tokens) of one pass named `desc`; shows them if `enabled`. Use as a context manager."""

    def __init__(self, desc: str, total_bytes: int | None, enabled: bool, *, interval: float | None = None,
                 clock: Callable[[], float] | None = None, stream: TextIO | None = None) -> None:
        self.desc = desc
        self.total = total_bytes
        self.interval = LINE_SECONDS if interval is None else interval
        self.clock = time.monotonic if clock is None else clock
        self.stream = sys.stderr if stream is None else stream
        self.done = self.tokens = 0
        self.start = self.last_line = self.clock()
        terminal = self.stream.isatty()
        self.lines = enabled and not terminal
        self.bar: Any = None
        if enabled and terminal:
            from tqdm import tqdm

            self.bar = tqdm(total=total_bytes, desc=desc, unit="B", unit_scale=True, unit_divisor=1024,
                            file=self.stream, leave=False)

    def __enter__(self) -> Progress:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def rate(self, now: float) -> str:
        """Tokens per second when tokens are counted, else bytes per second."""
        seconds = max(now - self.start, 1e-9)
        if self.tokens:
            return f"{self.tokens / seconds / 1e6:.2f}M tok/s"
        return f"{self.done / seconds / 1e6:.1f} MB/s"

    def line(self, now: float) -> str:
        """The status line, e.g. `encode 45.0 MB of 120.0 MB (37%), 1.20M tok/s`."""
        share = f" of {_megabytes(self.total)} ({min(self.done / self.total, 1):.0%})" if self.total else ""
        return f"prepare: {self.desc} {_megabytes(self.done)}{share}, {self.rate(now)}"

    def update(self, n_bytes: int, tokens: int = 0) -> None:
        """Count `n_bytes` more of text (and `tokens`); refresh the bar, or print a line if one is due."""
        self.done += n_bytes
        self.tokens += tokens
        if self.bar is not None:
            self.bar.update(n_bytes)
            self.bar.set_postfix_str(self.rate(self.clock()), refresh=False)
        elif self.lines:
            now = self.clock()
            if now - self.last_line >= self.interval:
                self.last_line = now
                print(self.line(now), file=self.stream, flush=True)

    def close(self) -> None:
        if self.bar is not None:
            self.bar.close()
            self.bar = None


class Heartbeat:
    """A line every `interval` seconds while a step without counts of its own runs (BPE training), if no terminal.

    The step runs in native code that releases the GIL, so a background thread can print meanwhile.
    """

    def __init__(self, desc: str, enabled: bool, *, interval: float | None = None,
                 stream: TextIO | None = None) -> None:
        self.desc = desc
        self.interval = LINE_SECONDS if interval is None else interval
        self.stream = sys.stderr if stream is None else stream
        self.enabled = enabled and not self.stream.isatty()
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._beat, daemon=True)

    def _beat(self) -> None:
        start = time.monotonic()
        while not self._stop.wait(self.interval):
            print(f"prepare: {self.desc}, {time.monotonic() - start:.0f} s so far", file=self.stream, flush=True)

    def __enter__(self) -> Heartbeat:
        if self.enabled:
            self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        if self.enabled:
            self._stop.set()
            self._thread.join()
