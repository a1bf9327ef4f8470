"""tinylm studio: every run folder under a root, read from its own files, for pages that watch and compare runs.

    runs.py          the runs under the root: status, stage, step, best evaluation, sparkline, lineage;
                     run names and the refusal of paths outside the root
    follow.py        a run's metrics.jsonl read from the byte offset a page reached
    launch.py        forms from the stage table's option fields; launch, stop (SIGTERM) and resume runs
    app.py           the routes: JSON views, the live event stream, the tokenizer playground, the pages
                     (static/, uPlot vendored)

Everything shown is read from the run folders (metrics.jsonl, status.json, checkpoints), never kept
in the studio's memory, so a refresh or a restart shows the same thing.
"""
