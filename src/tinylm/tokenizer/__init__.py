"""tinylm.tokenizer."""
