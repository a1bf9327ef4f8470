"""The one training engine: `run_training(config, stage=...)` runs every stage, pretraining to RL.

`loop.py` drives a run; `stage.py` is the protocol a stage implements (its model, batches, loss and
evaluation). Around them: the engine's options (`config.py`, which every stage's config extends),
setup, folder, lock and resume (`run_setup.py`, `run_dir.py`, `run_lock.py`, `resume_options.py`,
`run_checkpoint.py`), optimizers and schedules (`optim.py`, `muon.py`, `schedule.py`), one step's
accumulation and clipping (`step.py`), DDP/FSDP (`distributed.py`), faults, progress, MFU, the summary
and the loss plot.

The engine knows no stage: train never imports stages or cli, and needs neither data nor
evaluate (batches and evaluations come from the stage). It imports runtime, checkpoint,
metrics, options, config and errors.
"""
