"""tinylm.train."""
