"""Post-training: turning a pretrained next-token model into an assistant (chat format, SFT, preferences, RL)."""
