"""tinylm.data."""
