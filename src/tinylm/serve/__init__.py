"""tinylm.serve: an OpenAI-compatible HTTP API over one continuous-batching scheduler, and a web chat page.

    app.py        FastAPI routes (/v1/models, /v1/completions, /v1/chat/completions, /health, /metrics, /)
    protocol.py   request fields, response shapes and OpenAI-style errors
    scheduler.py  one thread owns the model: requests join and leave the running batch step by step
    slots.py      the batch itself: a KV cache whose rows have their own lengths (or recompute, classic)
    text.py       token ids -> text pieces: whole UTF-8 characters, stop strings held back and cut
    metrics.py    Prometheus text exposition: latency histograms, queue gauges, token counters
"""
