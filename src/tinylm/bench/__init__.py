"""Measurements behind `tinylm bench` and `tinylm compare`: speed next to a reference, measured in one run.

Every figure is the median of repeats with its spread (`timing.py`), and every headline is a ratio
between two measurements taken in the same process, interleaved, with the same threads and dtype,
so a noisy shared machine slows both sides alike. `suite.py` gathers `tinylm bench`'s measurements
(decode, training step, tokenizer, loader cost, matmul peak, memory bandwidth, profile);
`compare.py` trains the `variants.py` ablations side by side.

A top floor beside pipeline: it may use anything below (train, and stages.pretrain to train a
variant); only cli imports it, and it never imports cli or pipeline.
"""
