"""tinylm.inference."""
