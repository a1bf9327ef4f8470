"""The modern decoder, one idea per file: RMSNorm, RoPE, grouped-query or latent (MLA) attention, SwiGLU, MoE.

`model.py` assembles `ModernGPT` from `block.py` (pre-norm attention and MLP on the residual
stream), `attention.py` / `mla.py` with `mask.py`, `rope.py` and `blockwise_attention.py`,
`mlp.py` or `moe.py`, `norm.py`, and the preallocated `kv_cache.py` for decoding. The docs quote
these files; `tests/test_hf_parity.py` checks them against `transformers` to 1e-5.

Like the rest of models, it imports only config, torch and its sibling modules in tinylm.models.
"""
