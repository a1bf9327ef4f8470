"""Moved to `tinylm.tasks.rows` (file-based tasks read it); kept until evaluate/multiple_choice.py imports it there."""

from tinylm.tasks.rows import read_rows

__all__ = ["read_rows"]
