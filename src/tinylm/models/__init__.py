"""The two decoders and their building blocks: classic (GPT-2) and modern (Llama/Qwen/DeepSeek family).

`factory.build_model(config)` is the one map from a `ModelConfig` to a model: `classic.py`, or the
modern decoder assembled from one file per idea in `modern/`. Beside them: the chunked output-head
loss (`loss.py`), GPT-2 initialization (`init.py`), parameter/FLOP accounting and the
training-memory estimate (`accounting.py`, `memory.py`), LoRA (`lora.py`), vocabulary growth for
new tokens (`vocab_growth.py`) and the reward model's scalar head (`reward_model.py`).

A model knows nothing of training or of files: models imports config, errors and torch only;
never tokenizer, data, checkpoint, runtime, train, stages or cli (a checkpoint is loaded into a
model by checkpoint/load.py, from outside).
"""
