"""tinylm.stages.sft."""
