"""Stop strings: text is held back while it could still be the start of one, and a stop string is never sent.

Tokens become text through `TextStream` (whole UTF-8 characters only); this filter sits after it.
A piece that ends with "\\n\\nUs" might be the start of the stop string "\\n\\nUser:", so those
characters wait for the next piece; once a stop string appears, the text before it is the last
thing sent and the generation is cancelled.
"""

from __future__ import annotations


class StopStrings:
    def __init__(self, stops: list[str]) -> None:
        self.stops = [s for s in stops if s]
        self.held = ""
        self.stopped = False

    def push(self, piece: str) -> str:
        """The text that is safe to send now; sets `stopped` once a stop string appears."""
        if self.stopped:
            return ""
        text = self.held + piece
        hits = [i for i in (text.find(s) for s in self.stops) if i >= 0]
        if hits:
            self.stopped, self.held = True, ""
            return text[: min(hits)]
        keep = max((_overlap(text, s) for s in self.stops), default=0)
        self.held = text[len(text) - keep :] if keep else ""
        return text[: len(text) - keep]

    def flush(self) -> str:
        held, self.held = self.held, ""
        return "" if self.stopped else held


def _overlap(text: str, stop: str) -> int:
    """The length of the longest end of `text` that begins `stop` (shorter than the whole stop string)."""
    for n in range(min(len(text), len(stop) - 1), 0, -1):
        if text.endswith(stop[:n]):
            return n
    return 0
