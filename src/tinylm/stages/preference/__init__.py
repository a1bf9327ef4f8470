"""tinylm.stages.preference."""
