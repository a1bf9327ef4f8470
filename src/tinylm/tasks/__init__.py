"""Tasks: problems with a held-out split, a verifier and their own wrong answers, named by `registry.get_task`.

`task.py` says what every task gives; the built-in ones are generated offline from a seed
(`arith.py`, `stdlib_functions.py`, `code.py`, whose answers run in tinylm/sandbox; `calc.py`,
answered with the calculator tool, and `addition.py`, with its steps as reasoning), file-based ones
(`gsm8k.py`, `prompt_file.py`) read their rows through the one row reader (`data/rows/`: a local
JSONL, JSON or CSV file, or `hf:NAME`). `function_mistakes.py` and `preference_pairs.py` turn a
task's own wrong answers into preference pairs. SFT data, DPO pairs, RL `--task` and `tinylm eval
--tasks` all reach a task through `registry.py`.

A task is asked, it asks nothing: tasks imports errors, data (the stdlib corpus, the row reader),
sandbox and tools (the declarations its conversations carry) only; never evaluate, inference, train,
stages or cli.
"""
