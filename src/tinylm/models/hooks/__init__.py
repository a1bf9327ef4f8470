"""Hooks: what inspection reads from a model, taken from the model's own forward pass.

Each file attaches PyTorch forward hooks to the modules one idea lives in and records (or, for
patching, replaces) what flows through them; none recomputes a layer by hand. `sites.py` names
those modules once for both architectures:

    embedding output ─► block 0 ─► block 1 ─► ... ─► final norm ─► head
                         │  attention: Attend (q, k) ─► o_proj (input: every head's output side by side)
                         │  MLP: down projection (input: the neurons) ─► MLP output

residual.py       the residual stream after the embedding and after every block
attention_pattern.py  every head's attention probabilities, from the q and k that Attend received
head_outputs.py   each head's output (the o_proj input, split by head), and what each writes to the stream
mlp_outputs.py    what each MLP writes to the stream
neurons.py        the MLP's hidden activations (its neurons)
patching.py       replace any of these, at chosen rows and positions, by values from another run
"""
