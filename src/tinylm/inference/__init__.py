"""Generation from a trained model: sampling, the KV-cache engine, fast decoding, speculative decoding, int8.

`engine.py` generates batched and streaming, past the context window, with the same API for both
architectures, through `runners.py` (the ways a model continues a batch). `sampling.py` turns
logits into tokens; `fast_decode.py` is the modern forward without module machinery, for what
`fast_decode_support.py` classifies as handled; `speculative.py` drafts with a small model;
`int8.py` and `packed_bf16.py` shrink or prepack weights, `row_products.py` multiplies one float32
row as a matrix-vector product, `decode_timing.py` measures what the
decode-dtype policy decides on; `loading.py` loads a checkpoint, `streaming.py` and
`chat_session.py` turn ids into text and conversations.

It imports models, tokenizer, checkpoint, runtime, config and errors; never data, train, stages,
evaluate, serve or cli: generation works on any checkpoint without a trainer.
"""
