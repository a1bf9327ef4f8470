"""tinylm: train language models from scratch, one readable building block per file.

The house, top to bottom: each line imports only lines below it. tests/test_layering.py reads the
import graph (function-level imports included) and holds its main rules: models, tokenizer, data,
checkpoint, inference, serve, interop and evaluate never import train, stages or cli; only cli
imports cli or pipeline; no two packages import each other.
docs/where-things-go.md says where a new piece goes.

    cli/            the `tinylm` command: main.py, options generated from config fields, commands/*.py;
                    nothing else imports it
    pipeline/       `tinylm pipeline`: prepare -> pretrain -> SFT -> DPO -> RL -> eval, resumable
    bench/          `tinylm bench` and `tinylm compare`: speed next to a reference, in one process
    stages/         what plugs into the engine, one package each: pretrain/, sft/, preference/, rl/;
                    stages/__init__.py is the stage table every command and the pipeline read
    train/          the one engine: loop, stage protocol, optimizers, schedules, exact resume, DDP/FSDP
    evaluate/       `tinylm eval`: bits per byte, multiple choice, exact match, the report card
    serve/          an OpenAI-compatible HTTP API over one continuous-batching scheduler
    interop/        transformers and PEFT folders out, transformers models in, exact or refused
    inference/      sampling, the KV-cache engine, fast and speculative decoding, int8
    checkpoint.py   one folder per step, written atomically, read without unpickling; its parts
                    live in checkpoint_layout/save/prune/read/load.py
    options.py      options declared once, on the config field that holds the value
    runtime/        where and how a run computes: device, dtypes, attention kernel, compile, RNG, torchrun
    models/         the classic and modern decoders, LoRA, the reward head; they know nothing of training
    tasks/          problems with verifiers and wrong answers, the sandbox
    data/           corpora -> token shards -> batches
    tokenizer/      byte-level BPE and r50k, the chat format
    config.py presets.py options_file.py metrics.py paths.py errors.py
                    ModelConfig and named sizes; `--config FILE`; metrics.jsonl; tinylm's folders;
                    the one error type
"""

from tinylm.config import ModelConfig
from tinylm.errors import TinyLMError

__all__ = ["ModelConfig", "TinyLMError", "__version__"]
__version__ = "0.1.0"
