"""tinylm.runtime."""
