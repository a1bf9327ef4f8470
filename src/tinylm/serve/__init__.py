"""`tinylm serve`: an OpenAI-compatible HTTP API over one continuous-batching scheduler, and a web chat page.

    app.py, error_handlers.py   FastAPI routes (/v1/models, /v1/completions, /v1/chat/completions, /health,
                                /metrics, /admin/reload, /) and every error as OpenAI's JSON
    protocol.py                 request fields and response shapes OpenAI clients expect
    jobs.py, generation.py      a validated request -> scheduler jobs -> text, per choice
    scheduler.py, slots.py      one thread owns the model: requests join and leave the running batch
    row_sampling.py             each row's next token (inverse CDF from its seed) and its log-probs
    slot_cache.py               the KV cache whose rows are requests of different lengths
    engine_process.py           the scheduler in a process of its own, over a pipe (tinylm serve's default)
    reload.py                   new weights of the same model, swapped in once the running requests finish
    events.py, mailbox.py       what the scheduler thread tells the asyncio handlers, one wake-up per burst
    replies.py, logprobs.py     deltas as OpenAI replies or stream chunks; log-probs in both shapes
    text.py, served_model.py    stop strings held back and cut; what the routes know of the model
    metrics.py                  Prometheus text exposition: latency histograms, queue gauges, token counters

It serves through inference and imports models, tokenizer and errors; never train, stages or cli.
"""
