"""The live progress bar on stderr: step, loss, learning rate, tokens/s, MFU and the ETA.

stderr keeps stdout clean for the final sample and summary, so `tinylm train > out.txt` still shows
progress. Only rank 0 draws; with `--no-progress` the bar is off and metrics.jsonl still records it all.
"""

from __future__ import annotations

import sys
from typing import Any


def format_si(value: float) -> str:
    """1234567 -> '1.23M': short numbers for a narrow bar."""
    for unit, scale in (("G", 1e9), ("M", 1e6), ("k", 1e3)):
        if abs(value) >= scale:
            return f"{value / scale:.3g}{unit}"
    return f"{value:.3g}"


class Progress:
    def __init__(self, total: int, initial: int = 0, enabled: bool = True) -> None:
        self._bar: Any = None
        if enabled:
            from tqdm import tqdm

            self._bar = tqdm(total=total, initial=initial, file=sys.stderr, dynamic_ncols=True,
                             unit="step", desc="train", leave=True)

    def update(self, step: int, loss: float, lr: float, tokens_per_s: float, mfu: float | None) -> None:
        if self._bar is None:
            return
        self._bar.n = step
        postfix = f"loss {loss:.4f} lr {lr:.2e} {format_si(tokens_per_s)} tok/s"
        if mfu is not None:
            postfix += f" MFU {100 * mfu:.1f}%"
        self._bar.set_postfix_str(postfix, refresh=False)
        self._bar.refresh()

    def write(self, line: str) -> None:
        """A message that does not tear the bar."""
        if self._bar is not None:
            self._bar.write(line, file=sys.stderr)
        else:
            print(line, file=sys.stderr, flush=True)

    def close(self) -> None:
        if self._bar is not None:
            self._bar.close()
            self._bar = None
