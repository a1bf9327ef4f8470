"""tinylm.stages.rl."""
