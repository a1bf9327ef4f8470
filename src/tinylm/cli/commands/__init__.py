"""tinylm.cli.commands."""
