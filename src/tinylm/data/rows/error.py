"""The one exception a row reader or parser raises for a row it cannot read.

Its own module so that the file readers (`files.py`), the callers' parsers (SFT's messages, preference
pairs, task rows) and the collector (`read.py`) share it without importing each other.
"""

from __future__ import annotations


class RowError(ValueError):
    """A row that cannot be read; the message says why (the collector adds where)."""
