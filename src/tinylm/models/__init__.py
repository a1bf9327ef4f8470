"""tinylm.models."""
