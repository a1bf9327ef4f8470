"""Measurements behind `tinylm bench` and `tinylm compare`: speed next to a reference, measured in one run.

Every figure is the median of repeats with its spread, and every headline is a ratio between two
measurements taken in the same process, interleaved, with the same threads and dtype, so a noisy
shared machine slows both sides alike.
"""
