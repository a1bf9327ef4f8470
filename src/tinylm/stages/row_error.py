"""The one exception a row reader or parser raises for a row it cannot read.

Its own module so that the readers of files (`row_files.py`), the message checks (`messages.py`) and
the collector (`spec_rows.py`) share it without importing each other.
"""

from __future__ import annotations


class RowError(ValueError):
    """A row the stage cannot read; the message says why (the collector adds where)."""
