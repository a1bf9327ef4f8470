"""`tinylm pipeline`: prepare -> pretrain -> SFT -> DPO -> GRPO -> eval in one resumable command, with a stage table."""
