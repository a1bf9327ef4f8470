"""tinylm.stages.pretrain."""
