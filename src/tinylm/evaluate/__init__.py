"""Evaluation: the numbers that say what a stage changed (exact-match on verifiable tasks, ...)."""
