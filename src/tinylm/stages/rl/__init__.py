"""RL from verifiable rewards as a stage (`tinylm rl`): sample, score, compute advantages, update.

`stage.py` runs one step: `collect.py` gathers rollouts (`rollout.py`, or an inference server's through
`rollout_server.py`) scored by `rewards.py`,
`algorithm.py` and `algorithms.py` say what each algorithm does as data (the GRPO family, RLOO,
REINFORCE++, PPO with `gae.py`, in their own files), and `update.py` computes a micro-batch's loss
from `policy_losses.py`, `kl.py` and `reference.py`, with the step's advantages and totals in
`step_advantages.py` and `step_totals.py`; `status.py` and `plot.py` show how it goes.

A stage plugs into the engine: it imports train (the stage protocol, the plot), the shared stages
modules, tasks, inference, models, checkpoint, tokenizer, runtime, metrics, options and
evaluate.exact_match, and stages.preference.reward for `--reward model:PATH`; never cli or pipeline.
"""
