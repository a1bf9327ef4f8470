"""Preference tuning as stages: the DPO family (`tinylm dpo`) and reward modelling (`tinylm reward`).

`dpo.py` learns from pairs directly, with each loss of the family a pure function in `losses.py`
(KTO's whole-step reference point in `kto_step.py`) and the frozen reference three ways in
`reference.py`; `reward.py` trains a scalar head with the Bradley-Terry loss. Both read pairs
(`data.py`, `pair_rows.py`) through `pair_stage.py` and score answers in one forward
(`sequence_logprobs.py`); `config.py` holds what the two commands can be told.

A stage plugs into the engine: it imports train.stage, the shared stages modules (from_base,
post_config, ...), tasks, data, models, checkpoint, tokenizer, runtime, options and
evaluate.exact_match; never cli or pipeline, nor another stage.
"""
