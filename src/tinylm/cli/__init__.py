"""tinylm.cli.main."""
