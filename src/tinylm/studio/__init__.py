"""tinylm studio: every run folder under a root, read from its own files, for pages that watch and compare runs.

    runs.py          the runs under the root: status, stage, step, best evaluation, sparkline, lineage;
                     run names and the refusal of paths outside the root

Everything shown is read from the run folders (metrics.jsonl, status.json, checkpoints), never kept
in the studio's memory, so a refresh or a restart shows the same thing.
"""
