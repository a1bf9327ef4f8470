"""`tinylm pipeline`: prepare -> pretrain -> SFT -> DPO -> RL -> eval in one resumable command, with a stage table.

`config.py` reads the TOML settings (one table per stage, checked against that stage's own config
fields), `stages.py` calls each stage's Python API, `road.py` runs the road, `state.py` records what
finished in OUT/pipeline.json so a second run resumes, and `table.py` tabulates every stage's model.

The top of the house: it uses stages, train, evaluate, data and checkpoint; only cli imports it,
and it never imports cli.
"""
