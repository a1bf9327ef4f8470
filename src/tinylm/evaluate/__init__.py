"""`tinylm eval`: the numbers that say what a stage changed, kept with the run.

Bits per byte and dev loss (`bpb.py`, `dev_loss.py`), log-likelihood scoring for multiple choice
and preference accuracy (`loglikelihood.py`, `multiple_choice.py`, `preference_accuracy.py`, CORE
in `core.py`), exact-match and pass@k on verifiable tasks (`exact_match.py`); `tasks.py` names the
tasks `--tasks` takes, `scores.py` scores a checkpoint and appends to RUN/evals.jsonl, and
`report_card.py` rebuilds report.md/report.html from what the run left.

It reads checkpoints, tasks, data and tokenizers and generates through inference; it never
imports train, stages or cli, so any checkpoint is evaluated without a trainer.
"""
