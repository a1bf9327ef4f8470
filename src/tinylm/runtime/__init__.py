"""Where and how a run computes: the device, the dtypes, the attention kernel, compilation, RNG state, torchrun.

Each run-time choice (`--dtype auto`, `--attention auto`, `--compile auto`, the decode dtype) is a
policy that decides by rule or by measuring on the machine at hand and returns one `Choice` (value,
one-line reason, numbers: `choice.py`); `run_choices.py` asks them in order for a training run, each
decision is taken once per machine and shape and cached, busy machine or not, with a close call
decided as the safe default (`measure_cache.py`), and under torchrun rank 0 decides and the others
receive (`agreed.py`, `distributed.py`). `rng.py` turns generator state into plain tensors.

A measured choice takes what it measures as an argument, so runtime sits low in the house: it
imports config, errors, paths and (to build a probe model) models; never inference, train,
stages, evaluate, serve, interop, pipeline, bench or cli.
"""
