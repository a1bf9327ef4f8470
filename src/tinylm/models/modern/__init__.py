"""tinylm.models.modern."""
