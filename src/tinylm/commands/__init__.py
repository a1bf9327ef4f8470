"""tinylm.commands."""
