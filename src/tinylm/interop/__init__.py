"""tinylm.interop."""
